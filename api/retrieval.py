"""The read path of one instance, built from the settings without I/O: the fact
selector, the retriever, and the change rule that says which retrieved contexts a
knowledge-base change can have moved.

The service's runtime builds them here, and so does the detection benchmark
(``bench.detection_real``), so that both retrieve and judge changes the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from api.config import Settings
from kg.paths import DEFAULT_WEIGHTS
from kg.subgraph import SubgraphSelector
from rag.chat.change_rule import ChangeRule
from rag.chat.retriever import Retriever
from rag.chat.windows import PassageWindows
from rag.knowledge.embedding import Embedder
from rag.knowledge.service import KnowledgeService


@dataclass(frozen=True)
class ReadPath:
    """What answers a question from the stores, and what judges a change against it."""

    selector: SubgraphSelector
    retriever: Retriever
    rule: ChangeRule


def build_read_path(
    settings: Settings, knowledge: KnowledgeService, embedder: Embedder
) -> ReadPath:
    """The read path over ``knowledge``'s base and graph (opened later, by the caller)."""
    s = settings
    kb, graph = knowledge.kb, knowledge.graph_sync.graph
    selector = SubgraphSelector(
        graph,
        similarity_threshold=s.kg_similarity_threshold,
        path_weights=DEFAULT_WEIGHTS if s.kg_path_aware else None,
    )
    windows = (
        PassageWindows(kb, embedder.count_tokens, s.passage_window_tokens)
        if s.passage_window_tokens > s.chunk_tokens
        else None
    )
    retriever = Retriever(
        kb,
        selector,
        s.kg_max_triples,
        windows,
        identifier_candidates=s.identifier_rerank_candidates,
    )
    # The graph's facts of changed documents, for a change that did not note the facts
    # it brought (``ChangeSet.new_facts``), read from the snapshot chats read.
    rule = ChangeRule(
        fact_vectors=(
            (lambda docs: graph.snapshot.document_edge_vectors(docs)) if s.kg_max_triples else None
        ),
        fact_entities=(
            (lambda docs: graph.snapshot.document_entities(docs)) if s.kg_path_aware else None
        ),
        max_facts=s.kg_max_triples,
        min_fact_score=selector.min_score,
        fact_gain=selector.max_gain,
    )
    return ReadPath(selector, retriever, rule)
