"""The identifier rerank in the retriever, on real Qdrant local mode and the real model,
over the pragma fixture (``tests/data/sqlite-pragmas``: six short documents), and the
entry bar that keeps the context memo right about a reranked top-k."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from rag.chat.change_rule import kth_score
from rag.chat.memo import ContextMemo, Retrieved
from rag.chat.prompt import PromptBuilder
from rag.chat.retriever import Retrieval, Retriever
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.models import (
    ChangeSet,
    ChunkRecord,
    DocumentIn,
    EmbeddingPrecision,
    Passage,
)

PRAGMAS = Path(__file__).resolve().parents[2] / "data" / "sqlite-pragmas"


def _documents() -> list[DocumentIn]:
    """As uploaded without metadata: no title is embedded with the chunks (with titles the
    model ranks ``foreign_keys`` first for both questions, by 0.009 for the bare name)."""
    return [
        DocumentIn(id=path.stem, text=path.read_text()) for path in sorted(PRAGMAS.glob("*.txt"))
    ]


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    """Embedded in float32 whatever the host's default: the bare name's misranking, which
    the rerank test starts from, is float32's (int8, the default on a CPU with VNNI or
    AMX, already ranks ``foreign_keys`` first)."""
    folder = tmp_path_factory.mktemp("pragmas")
    client = QdrantClient(path=str(folder / "qdrant"))
    embedder = shared_embedder(EmbeddingPrecision.FLOAT32)
    knowledge = KnowledgeBase(folder, client, embedder, chunk_tokens=128)
    knowledge.upsert(_documents())
    yield knowledge
    client.close()


def _top(retriever: Retriever, question: str) -> list[str]:
    return [p.doc_id for p in retriever.retrieve(question, top_k=3).passages]


def test_the_users_question(kb: KnowledgeBase) -> None:
    """What the SQLite user asked: the documented pragma first, with or without the rerank."""
    question = "What does PRAGMA foreign_keys do?"
    assert _top(Retriever(kb), question)[0] == "foreign_keys"
    assert _top(Retriever(kb, identifier_candidates=50), question)[0] == "foreign_keys"


def test_the_rerank_fixes_the_bare_name(kb: KnowledgeBase) -> None:
    """Without ``PRAGMA`` the model puts ``foreign_key_list`` first; the rerank puts the
    document that defines ``foreign_keys`` there."""
    question = "What does foreign_keys do?"
    assert _top(Retriever(kb), question)[0] == "foreign_key_list"
    reranked = Retriever(kb, identifier_candidates=50).retrieve(question, top_k=3)
    assert reranked.passages[0].doc_id == "foreign_keys"
    # Fewer chunks than candidates: any new chunk could be promoted into this top 3.
    assert reranked.entry_bar == -1.0
    assert kth_score(reranked) == -1.0


def test_the_bar_is_the_weakest_candidate(kb: KnowledgeBase) -> None:
    retrieval = Retriever(kb, identifier_candidates=4).retrieve("What does foreign_keys do?")
    dense = Retriever(kb).retrieve("What does foreign_keys do?", top_k=4)
    assert retrieval.entry_bar == dense.passages[-1].score
    assert kth_score(retrieval) == dense.passages[-1].score


def test_questions_without_identifiers_are_untouched(kb: KnowledgeBase) -> None:
    question = "How do I make constraint checks wait until commit?"
    plain = Retriever(kb).retrieve(question)
    reranked = Retriever(kb, identifier_candidates=50).retrieve(question)
    assert [p.chunk_id for p in reranked.passages] == [p.chunk_id for p in plain.passages]
    assert reranked.entry_bar is None
    assert kth_score(reranked) == plain.passages[-1].score


def _remembered(bar: float | None) -> ContextMemo:
    query = np.asarray([1.0, 0.0, 0.0], dtype=np.float32)
    passages = [
        Passage(doc_id="d1", chunk_id="c1", text="PRAGMA foreign_keys;", score=0.4),
        Passage(doc_id="d2", chunk_id="c2", text="foreign keys", score=0.9),
    ]
    retrieval = Retrieval("q", query, passages, entry_bar=bar)
    memo = ContextMemo()
    memo.put("q", memo.generation, Retrieved(retrieval, PromptBuilder().prefix(passages, [])))
    return memo


def test_the_memo_forgets_a_rerank_a_weaker_new_chunk_can_enter() -> None:
    """A new chunk scoring 0.3 is below every passage shown, but above the weakest
    candidate (0.2): the rerank could promote it, so the memo must forget the item."""
    weak = np.asarray([0.3, (1 - 0.3**2) ** 0.5, 0.0])
    added = ChunkRecord(doc_id="d9", chunk_id="c9", embedding=weak.tolist())
    batch = [ChangeSet(kb_version=2, added=["d9"], added_chunks=[added])]
    reranked, plain = _remembered(0.2), _remembered(None)
    assert reranked.forget(batch) == 1 and reranked.get("q") is None
    assert plain.forget(batch) == 0 and plain.get("q") is not None
