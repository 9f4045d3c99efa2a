"""Retrieval: question → embedding → top-k passages → knowledge-graph triples."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kg.links import QuestionLinks
from rag.chat.identifiers import IdentifierMatcher, promote
from rag.chat.query import retrieval_text
from rag.chat.windows import PassageWindows
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.models import Passage

#: Threads that search for passages while retrievals link their questions to the graph.
SEARCH_THREADS = 4


class Fact(Protocol):
    """A knowledge-graph triple chosen for a prompt, with its relevance score."""

    @property
    def subject(self) -> str: ...
    @property
    def predicate(self) -> str: ...
    @property
    def object(self) -> str: ...
    @property
    def score(self) -> float: ...


class FactSource(Protocol):
    """Picks the triples to inject for a question (``kg.SubgraphSelector``), with the
    keys of the entities they join (``Retrieval.fact_reach``)."""

    def link_question(self, question: str, question_embedding: np.ndarray) -> QuestionLinks:
        """The question's links that need no passages: made while they are searched."""
        ...

    def select_with_reach(
        self,
        question: str,
        question_embedding: np.ndarray,
        passages: Sequence[Passage] = (),
        max_triples: int = 3,
        *,
        links: QuestionLinks | None = None,
    ) -> tuple[Sequence[Fact], frozenset[str]]: ...


@dataclass(frozen=True)
class Retrieval:
    """Everything a prompt is built from, plus the embedding that found it."""

    question: str
    embedding: np.ndarray
    passages: list[Passage]
    facts: Sequence[Fact] = ()
    elapsed_ms: float = 0.0
    #: Keys of the graph entities ``facts`` join: a new fact touching none of them can
    #: enter ``facts`` only by its score (``rag.chat.memo``).
    fact_reach: frozenset[str] = frozenset()
    #: The score a new chunk must beat to be able to enter ``passages``, where that is not
    #: the last passage's (``rag.chat.change_rule.kth_score``): after an identifier rerank, any
    #: chunk among the candidates can be promoted, so the weakest candidate's score, or
    #: -1 (every chunk) where the knowledge base had fewer chunks than were asked for.
    entry_bar: float | None = None

    @property
    def triples(self) -> list[tuple[str, str, str]]:
        return [(f.subject, f.predicate, f.object) for f in self.facts]


class Retriever:
    """Shared by chat and warmup, so both see the same context for a question."""

    def __init__(
        self,
        kb: KnowledgeBase,
        facts: FactSource | None = None,
        max_triples: int = 3,
        windows: PassageWindows | None = None,
        identifier_candidates: int = 0,
    ) -> None:
        """``windows``: widen each hit for the prompt (small-to-big); None: the prompt
        shows the retrieved chunks as they are. ``identifier_candidates``: for a question
        that names an identifier (``rag.chat.identifiers``: ``core.autocrlf``,
        ``--no-ff``, ``foreign_keys``), fetch this many chunks and move those that define
        or mention it ahead before taking the top k (0: off)."""
        self.kb = kb
        self.facts = facts
        self.max_triples = max_triples
        self.windows = windows
        self.identifier_candidates = identifier_candidates
        # Threads start on first use (never without facts); more than one, so that a
        # chat's search never waits in this process behind a warmup's.
        self._searches = ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="passage-search")

    def embed_questions(self, questions: Sequence[str]) -> np.ndarray:
        """(n, dim) query vectors, as ``retrieve`` embeds a question (blocking)."""
        return self.kb.embedder.embed_questions([retrieval_text(q) for q in questions])

    def retrieve(
        self, question: str, top_k: int = 3, embedding: np.ndarray | None = None
    ) -> Retrieval:
        """Blocking: the question is embedded and linked to the graph in this thread,
        its passages searched in another meanwhile (or here, without facts).

        Pass a stored ``embedding`` to skip re-embedding the question.
        """
        started = time.perf_counter()
        text = retrieval_text(question)
        if embedding is None:
            embedding = self.kb.embedder.embed_query(text)
        facts: Sequence[Fact] = ()
        reach: frozenset[str] = frozenset()
        if self.facts is None or self.max_triples <= 0:
            passages, bar = self._passages(text, embedding, top_k)
        else:
            # The index searches (in its own process, or on a server) while this thread
            # links the question to the graph by its words and its embedding.
            search = self._searches.submit(self._passages, text, embedding, top_k)
            try:
                links = self.facts.link_question(text, embedding)
            finally:
                wait([search])
            passages, bar = search.result()
            facts, reach = self.facts.select_with_reach(
                text, embedding, passages, self.max_triples, links=links
            )
        if self.windows is not None:
            passages = self.windows.widen(passages)
        elapsed = (time.perf_counter() - started) * 1000
        return Retrieval(question, embedding, passages, facts, elapsed, reach, bar)

    def _passages(
        self, text: str, embedding: np.ndarray, top_k: int
    ) -> tuple[list[Passage], float | None]:
        """The dense top k; for a question with identifiers (and the rerank on), the top
        k of the dense top ``identifier_candidates`` reranked by them, with the weakest
        candidate's score as the entry bar. Measured by ``bench.identifier_probe`` on
        Git's documentation: recall@1 of questions naming an option or a config key
        0.175 -> 0.700 (sections) and 0.350 -> 0.825 (Markdown pages), the heading
        questions unchanged; the rerank takes about 1.3 ms."""
        matcher = IdentifierMatcher.of(text) if self.identifier_candidates else None
        if not matcher:
            return self.kb.retrieve(embedding, top_k), None
        wanted = max(top_k, self.identifier_candidates)
        candidates = self.kb.retrieve(embedding, wanted)
        bar = candidates[-1].score if len(candidates) >= wanted else -1.0
        return promote(candidates, matcher, lambda p: p.text)[:top_k], bar
