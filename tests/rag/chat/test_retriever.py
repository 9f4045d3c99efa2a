"""Retriever on real Qdrant local mode and the real embedding model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from rag.chat.query import normalize_query, retrieval_text
from rag.chat.retriever import Retriever
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn

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
