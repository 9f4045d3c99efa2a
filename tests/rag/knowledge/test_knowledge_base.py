"""KnowledgeBase on real Qdrant local mode and the real embedding model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from rag.knowledge.base import DocumentNotFoundError, KnowledgeBase
from rag.knowledge.embedding import Embedder
from rag.knowledge.kvstore import SqliteKVStore
from rag.knowledge.models import DocumentIn

CURIE = DocumentIn(id="curie", text="Marie Curie discovered polonium and radium in Paris.")
RIVER = DocumentIn(id="river", text="The Amazon River empties into the Atlantic Ocean in Brazil.")
LONG = DocumentIn(
    id="long",
    text=" ".join(f"Sentence number {i} talks about the topic of item {i}." for i in range(200)),
)


@pytest.fixture
def open_kb(tmp_path: Path, embedder: Embedder) -> Iterator[object]:
    clients: list[QdrantClient] = []

    def open_() -> KnowledgeBase:
        for c in clients:
            c.close()
        client = QdrantClient(path=str(tmp_path / "qdrant"))
        clients.append(client)
        return KnowledgeBase(tmp_path, client, embedder, chunk_tokens=128)

    yield open_
    for c in clients:
        c.close()


def top(kb: KnowledgeBase, question: str) -> list[str]:
    return [p.text for p in kb.retrieve(kb.embedder.embed_query(question), 3)]


def test_upsert_classifies_and_unchanged_embeds_nothing(open_kb, embedder: Embedder) -> None:
    kb = open_kb()
    first = kb.upsert([CURIE, RIVER])
    assert (first.added, first.updated, first.unchanged, first.kb_version) == (
        ["curie", "river"], [], [], 1,
    )  # fmt: skip
    before = embedder.texts_embedded
    again = kb.upsert([CURIE, RIVER])
    assert again.unchanged == ["curie", "river"] and not again.added
    assert again.kb_version == 1
    assert embedder.texts_embedded == before


def test_changed_document_replaces_its_chunks(open_kb) -> None:
    kb = open_kb()
    kb.upsert([CURIE, RIVER])
    old_chunks = kb.chunk_ids("curie")
    change = kb.upsert([DocumentIn(id="curie", text="Marie Curie was born in Warsaw in 1867.")])
    assert change.updated == ["curie"]
    assert set(change.removed_chunk_ids) == set(old_chunks)
    texts = top(kb, "What did Marie Curie discover?")
    assert not any("polonium" in t for t in texts)
    assert any("Warsaw" in t for t in texts)
    assert kb.count_chunks() == 2


def test_chunks_fit_the_embedding_window(open_kb, embedder: Embedder) -> None:
    kb = open_kb()
    kb.upsert([LONG])
    chunks = kb.chunk_texts("long")
    assert len(chunks) > 5
    for _, text in chunks:
        assert len(embedder.tokenizer(text)) <= 256


def test_delete_and_unknown(open_kb) -> None:
    kb = open_kb()
    kb.upsert([CURIE, RIVER])
    change = kb.delete("curie")
    assert change.deleted == ["curie"] and change.kb_version == 2
    assert kb.document_ids() == ["river"]
    assert all("polonium" not in t for t in top(kb, "polonium"))
    with pytest.raises(DocumentNotFoundError):
        kb.delete("curie")
    # a deleted document can come back as new
    assert kb.upsert([CURIE]).added == ["curie"]


def test_state_survives_reopen(open_kb) -> None:
    kb = open_kb()
    kb.upsert([CURIE, RIVER])
    kb.delete("river")
    kb = open_kb()
    assert kb.version == 2
    assert kb.document_ids() == ["curie"]
    assert "polonium" in top(kb, "What did Curie discover?")[0]
    assert kb.upsert([CURIE]).unchanged == ["curie"]


def test_crash_between_add_and_commit_leaves_old_version(open_kb, monkeypatch) -> None:
    """Fault injection: the docstore write (the commit point) fails after the new chunks
    were added."""
    kb = open_kb()
    kb.upsert([CURIE])

    def disk_error(*args: object, **kwargs: object) -> None:
        raise OSError("disk full (injected)")

    monkeypatch.setattr(SqliteKVStore, "commit", disk_error)
    with pytest.raises(OSError):
        kb.upsert([DocumentIn(id="curie", text="Marie Curie was born in Warsaw.")])
    monkeypatch.undo()
    # the live instance rolled back ...
    assert kb.version == 1 and kb.count_chunks() == 1
    assert "polonium" in top(kb, "Marie Curie")[0]
    kb = open_kb()  # ... and so does a reopen
    assert kb.count_chunks() == 1
    texts = top(kb, "Marie Curie")
    assert len(texts) == 1 and "polonium" in texts[0]
    assert kb.upsert([CURIE]).unchanged == ["curie"]
