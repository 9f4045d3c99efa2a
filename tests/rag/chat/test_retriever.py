"""Retriever on real Qdrant local mode and the real embedding model (the fact sources and
the faults below are injected, and say so)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pytest
from qdrant_client import QdrantClient

from kg.links import QuestionLinks
from kg.models import ScoredTriple
from rag.chat.query import normalize_query, retrieval_text
from rag.chat.retriever import Retriever
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.edge import VectorIndexError
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn, Passage

DOCS = [
    DocumentIn(id="curie", text="Marie Curie discovered polonium and radium in Paris."),
    DocumentIn(id="river", text="The Amazon River empties into the Atlantic Ocean in Brazil."),
    DocumentIn(id="tower", text="The Eiffel Tower was finished in 1889 for the World's Fair."),
    DocumentIn(id="cpp", text="C++ adds classes and templates to the C language."),
]


@pytest.fixture
def retriever(tmp_path: Path, embedder: Embedder) -> Iterator[Retriever]:
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    kb = KnowledgeBase(tmp_path, client, embedder, chunk_tokens=128)
    kb.upsert(DOCS)
    yield Retriever(kb)
    client.close()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What did Marie Curie discover?", "What did Marie Curie discover"),
        ("  what  did marie\tcurie discover ?? ", "what did marie curie discover"),
        ("What did Marie Curie discover!", "What did Marie Curie discover"),
        ("What is C++?", "What is C++"),
        ("What's the Eiffel Tower's height...", "What's the Eiffel Tower's height"),
        ("？", "?"),  # nothing but marks: kept (NFKC-folded) rather than emptied
    ],
)
def test_retrieval_text(question: str, expected: str) -> None:
    assert retrieval_text(question) == expected


def test_query_keys() -> None:
    key = normalize_query("What colour is the river Zorn?")
    for spelling in ("what colour is the RIVER zorn ??", "  What  colour is the river Zorn! "):
        assert normalize_query(spelling) == key
    assert normalize_query("Where is the river Zorn?") != key


def test_spellings_of_one_question_retrieve_one_context(retriever: Retriever) -> None:
    """Every spelling that shares a warm-registry key must share the context too,
    or a warm prefix would serve only some of them."""
    spellings = [
        "What did Marie Curie discover?",
        "what did marie curie discover",
        "WHAT DID MARIE CURIE DISCOVER?",
        "What did Marie Curie discover ??",
        "  What  did  Marie  Curie  discover? ",
        "What did Marie Curie discover!",
    ]
    assert len({normalize_query(s) for s in spellings}) == 1
    first, *others = [retriever.retrieve(s) for s in spellings]
    assert first.passages[0].doc_id == "curie"
    for spelling, other in zip(spellings[1:], others, strict=True):
        np.testing.assert_allclose(other.embedding, first.embedding, atol=1e-6, err_msg=spelling)
        assert [p.chunk_id for p in other.passages] == [p.chunk_id for p in first.passages]


def test_stored_question_vectors_match_what_a_chat_retrieves_with(retriever: Retriever) -> None:
    """Seed queries are embedded in a batch and later retrieved with that vector: it
    must be the vector a chat asking the same question would use."""
    questions = ["Where does the Amazon River end?", "When was the Eiffel Tower finished!"]
    vectors = retriever.embed_questions(questions)
    for question, vector in zip(questions, vectors, strict=True):
        np.testing.assert_allclose(vector, retriever.retrieve(question).embedding, atol=1e-5)


class _MeetingFacts:
    """A fact source whose link waits until the knowledge base's search has started
    (and the search, below, until the link has): a retriever that searched and linked
    one after the other would time out here."""

    def __init__(self) -> None:
        self.linking = threading.Event()
        self.searching = threading.Event()
        self.link_error: Exception | None = None
        self.linked_while_searching = False

    def link_question(self, question: str, question_embedding: np.ndarray) -> QuestionLinks:
        self.linking.set()
        self.linked_while_searching = self.searching.wait(MEETING_TIMEOUT_S)
        if self.link_error is not None:
            raise self.link_error
        return cast(QuestionLinks, ("links", question))

    def select_with_reach(
        self,
        question: str,
        question_embedding: np.ndarray,
        passages: Sequence[Passage] = (),
        max_triples: int = 3,
        *,
        links: QuestionLinks | None = None,
    ) -> tuple[list[ScoredTriple], frozenset[str]]:
        assert links == ("links", question)  # the links made during the search
        doc = passages[0].doc_id
        fact = ScoredTriple(subject=doc, predicate="is", object="found", score=1, doc_id=doc)
        return [fact], frozenset()


MEETING_TIMEOUT_S = 30.0


@pytest.fixture
def meeting(retriever: Retriever, monkeypatch: pytest.MonkeyPatch) -> _MeetingFacts:
    facts = _MeetingFacts()
    search = retriever.kb.retrieve

    def meet(embedding: np.ndarray, top_k: int = 3) -> list[Passage]:
        facts.searching.set()
        assert facts.linking.wait(MEETING_TIMEOUT_S), "the search ran before the link"
        return search(embedding, top_k)

    monkeypatch.setattr(retriever.kb, "retrieve", meet)
    retriever.facts = facts
    return facts


def test_passages_are_searched_while_the_question_is_linked(
    retriever: Retriever, meeting: _MeetingFacts
) -> None:
    found = retriever.retrieve("What did Marie Curie discover?")
    assert meeting.linked_while_searching
    assert found.passages[0].doc_id == "curie"
    assert found.triples == [("curie", "is", "found")]


def test_a_failed_search_fails_the_retrieval(
    retriever: Retriever, meeting: _MeetingFacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the knowledge base's search raises, as the index's does when its
    process died (``VectorIndexError``); the retrieval raises it, after the link."""
    met = retriever.kb.retrieve

    def fail(embedding: np.ndarray, top_k: int = 3) -> list[Passage]:
        met(embedding, top_k)
        raise VectorIndexError("the vector index's process stopped")

    monkeypatch.setattr(retriever.kb, "retrieve", fail)
    with pytest.raises(VectorIndexError, match="process stopped"):
        retriever.retrieve("What did Marie Curie discover?")
    assert meeting.linked_while_searching


def test_a_failed_link_fails_the_retrieval_once_the_search_has_ended(
    retriever: Retriever, meeting: _MeetingFacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the graph's link raises; the retrieval raises it, and not before the
    search it started has ended (no search is left running behind a failed retrieval)."""
    ended = threading.Event()
    met = retriever.kb.retrieve

    def search(embedding: np.ndarray, top_k: int = 3) -> list[Passage]:
        try:
            return met(embedding, top_k)
        finally:
            time.sleep(0.2)  # a slow end: a retrieval that did not wait would finish first
            ended.set()

    monkeypatch.setattr(retriever.kb, "retrieve", search)
    meeting.link_error = RuntimeError("the graph's snapshot is unreadable")
    with pytest.raises(RuntimeError, match="unreadable"):
        retriever.retrieve("What did Marie Curie discover?")
    assert ended.is_set()
