"""The knowledge base's state in SQLite: writes touch only their own rows, a real full
file is a clean ENOSPC, and an old folder's ``docstore.json`` moves in once."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

from rag.knowledge.base import KnowledgeBase
from rag.knowledge.edge import EdgeIndex
from rag.knowledge.embedding import EMBEDDING_DIM, Embedder, default_precision
from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.kvstore import SqliteKVStore
from rag.knowledge.models import DocumentIn, EmbeddingPrecision
from rag.knowledge.state import (
    LEGACY_FILE,
    META,
    METADATA,
    STATE_FILE,
    EmbeddingMismatchError,
    KBState,
)


def kb_on(folder: Path, embedder: Embedder) -> KnowledgeBase:
    return KnowledgeBase(folder, EdgeIndex(folder / "edge", EMBEDDING_DIM), embedder)


def doc(i: int) -> DocumentIn:
    return DocumentIn(id=f"doc-{i}", text=f"Town {i} lies on river {i} and trades in wool {i}.")


def statements_of_one_upsert(folder: Path, embedder: Embedder, documents: int) -> int:
    """SQL statements that write, in one document's ingest into a KB of ``documents``."""
    kb = kb_on(folder, embedder)
    kb.upsert([doc(i) for i in range(documents)])
    writes: list[str] = []
    db = kb._state.kv._db
    db.set_trace_callback(
        lambda sql: writes.append(sql) if sql.split()[0] in ("INSERT", "DELETE", "UPDATE") else None
    )
    kb.upsert([DocumentIn(id="doc-0", text="Town 0 now trades in salt.")])
    db.set_trace_callback(None)
    kb.close()
    return len(writes)


def test_a_write_changes_only_its_own_rows(tmp_path: Path, embedder: Embedder) -> None:
    """O(change): replacing one document writes as many rows in a knowledge base of 40
    documents as in one of 2 (the JSON docstore rewrote every document's each time)."""
    small = statements_of_one_upsert(tmp_path / "small", embedder, 2)
    large = statements_of_one_upsert(tmp_path / "large", embedder, 40)
    assert 0 < small == large, (small, large)


def test_a_full_state_file_fails_the_write_with_enospc_and_keeps_the_last_commit(
    tmp_path: Path, embedder: Embedder
) -> None:
    """No injection: SQLite's own SQLITE_FULL, from a page limit on the file."""
    kb = kb_on(tmp_path, embedder)
    kb.upsert([doc(0)])
    pages = kb._state.kv._db.execute("PRAGMA page_count").fetchone()[0]
    kb._state.kv._db.execute(f"PRAGMA max_page_count = {pages + 1}")
    big = DocumentIn(id="big", text=" ".join(f"Sentence {i} about wool." for i in range(3000)))
    with pytest.raises(OSError) as failed:
        kb.upsert([big])
    assert failed.value.errno == errno.ENOSPC
    assert kb.document_ids() == ["doc-0"] and kb.version == 1
    kb.close()
    kb = kb_on(tmp_path, embedder)
    assert kb.document_ids() == ["doc-0"] and kb.count_chunks() == len(kb.chunk_ids("doc-0"))
    kb.close()


def legacy_folder(folder: Path) -> None:
    """A ``docstore.json`` as the JSON docstore wrote it: two documents, version 7."""
    store = SimpleDocumentStore()
    for doc_id, text in (("curie", "Marie Curie discovered radium."), ("zorn", "The Zorn.")):
        node = TextNode(id_=f"{doc_id}-0", text=text, metadata={"doc_hash": f"h-{doc_id}"})
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc_id)
        store.add_documents([node], store_text=True)
        store.set_document_hash(doc_id, f"h-{doc_id}")
    folder.mkdir(parents=True, exist_ok=True)
    saved = {
        "kb_version": 7,
        "docstore": store.to_dict(),
        "triples": {"zorn": [["Zorn", "is", "a river"]]},
    }
    (folder / LEGACY_FILE).write_text(json.dumps(saved))


def test_an_old_docstore_json_moves_into_sqlite_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy_folder(tmp_path)

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt  # stopped after the copy, before it was put in place

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", interrupted)
        with pytest.raises(KeyboardInterrupt):
            KBState.open(tmp_path)
    assert (tmp_path / LEGACY_FILE).exists() and not (tmp_path / STATE_FILE).exists()

    state = KBState.open(tmp_path)  # the next start moves it
    assert state.document_ids() == ["curie", "zorn"] and state.version == 7
    assert state.docstore.get_document_hash("curie") == "h-curie"
    assert state.supplied_triples("zorn") == [["Zorn", "is", "a river"]]
    [node] = state.docstore.get_nodes(["curie-0"])
    assert node.get_content() == "Marie Curie discovered radium."
    state.close()
    assert not (tmp_path / LEGACY_FILE).exists()
    assert (tmp_path / f"{LEGACY_FILE}.migrated").exists()
    assert not (tmp_path / f"{STATE_FILE}.partial").exists()

    state = KBState.open(tmp_path)  # nothing left to move; the same state
    assert state.version == 7 and state.document_ids() == ["curie", "zorn"]
    state.close()


def test_uncommitted_changes_roll_back_and_commits_survive_a_reopen(tmp_path: Path) -> None:
    kv = SqliteKVStore(tmp_path / STATE_FILE)
    kv.put("a", {"v": 1})
    kv.commit()
    kv.put("b", {"v": 2})
    assert kv.pending and kv.get("b") == {"v": 2}  # the writer sees its own change
    kv.rollback()
    assert kv.get("b") is None and not kv.pending
    kv.put("c", {"v": 3})
    kv.close()  # closed without a commit: as a crash would leave it
    kv = SqliteKVStore(tmp_path / STATE_FILE)
    assert kv.get_all() == {"a": {"v": 1}}
    kv.close()


def test_the_document_count_follows_every_write_and_rollback(tmp_path: Path) -> None:
    """Counted once and kept (``/ready`` asks on every probe): each write that can
    change it, kept or rolled back, makes the next ask count again."""
    state = KBState.open(tmp_path)

    def put(*ids: str) -> None:
        docs = [Document(id_=d, text="", metadata={DOC_HASH_KEY: f"hash-{d}"}) for d in ids]
        chunks = [
            TextNode(id_=f"{d}#0", text=d, relationships={
                NodeRelationship.SOURCE: RelatedNodeInfo(node_id=d)
            })
            for d in ids
        ]  # fmt: skip
        state.put(docs, chunks, {})

    def counted() -> int:
        assert state.document_count() == len(state.document_ids())
        return state.document_count()

    assert counted() == 0
    put("a", "b")
    assert counted() == 2
    state.save()
    put("c")
    assert counted() == 3  # a pending write is seen, as the ids see it
    state.rollback()
    assert counted() == 2
    state.forget("a")
    assert counted() == 1
    put("b", "d")  # one replaced, one new
    assert counted() == 2
    state.save()
    state.close()
    assert KBState.open(tmp_path).document_count() == 2


def test_the_hashes_read_at_once_are_the_docstores_one_by_one(tmp_path: Path) -> None:
    """``hashes`` (one query, a start's reconcile) gives each document what the
    docstore's own lookup does: chunks' hashes left out, a document without one None,
    ids sorted, a rolled-back write unseen."""
    state = KBState.open(tmp_path)
    docs = [Document(id_=d, text="", metadata={DOC_HASH_KEY: f"hash-{d}"}) for d in "cab"]
    chunks = [
        TextNode(id_=f"{d.id_}#0", text=d.id_, relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id=d.id_)
        })
        for d in docs
    ]  # fmt: skip
    state.put(docs, chunks, {})
    state.save()
    state.kv.delete("b", collection=METADATA)  # a document whose hash is gone
    state.save()
    state.put([Document(id_="d", text="", metadata={DOC_HASH_KEY: "hash-d"})], [], {})
    state.rollback()
    one_by_one = {d: state.docstore.get_document_hash(d) for d in state.document_ids()}
    assert state.hashes() == one_by_one == {"a": "hash-a", "b": None, "c": "hash-c"}
    assert list(state.hashes()) == ["a", "b", "c"]
    state.close()


def test_a_state_file_that_cannot_be_opened_is_a_clear_os_error(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).mkdir()  # a folder where the file should be
    with pytest.raises(OSError) as failed:
        SqliteKVStore(tmp_path / STATE_FILE)
    assert failed.value.errno in (errno.EACCES, errno.EIO) and "SQLite" in str(failed.value)
    assert isinstance(failed.value.__cause__, sqlite3.Error)


def test_a_knowledge_base_refuses_an_embedder_it_was_not_built_with(
    tmp_path: Path, embedder: Embedder
) -> None:
    kb = kb_on(tmp_path, embedder)
    kb.upsert([doc(0)])
    kb.close()
    other = Embedder(model_path=tmp_path / "another-model")  # never loaded: open embeds nothing
    with pytest.raises(EmbeddingMismatchError, match="another-model"):
        kb_on(tmp_path, other)
    kb = kb_on(tmp_path, embedder)  # the index process of the refused open is gone
    assert kb.document_ids() == ["doc-0"]
    kb.close()


def test_a_knowledge_base_from_before_the_embedder_was_recorded_stays_float32(
    tmp_path: Path,
) -> None:
    """Such a base was embedded in float32: a default of int8 must not add int8 vectors
    to it, and int8 asked for is refused. Its record is removed here to make one."""
    float32 = Embedder(precision=EmbeddingPrecision.FLOAT32)
    kb = kb_on(tmp_path, float32)
    kb.upsert([doc(0)])
    kb.close()
    kv = SqliteKVStore(tmp_path / STATE_FILE)
    assert kv.delete("embedding", collection=META)
    kv.commit()
    kv.close()
    asked = Embedder(model_path=float32.model_path, precision=EmbeddingPrecision.INT8)
    with pytest.raises(EmbeddingMismatchError, match="onnxruntime int8"):
        kb_on(tmp_path, asked)
    following = Embedder()
    kb = kb_on(tmp_path, following)
    assert following.precision is EmbeddingPrecision.FLOAT32
    kb.close()
    kv = SqliteKVStore(tmp_path / STATE_FILE)
    assert kv.get("embedding", collection=META) == {"value": float32.identity}
    kv.close()


def test_a_knowledge_base_embedded_with_8bit_int8_weights_keeps_them(tmp_path: Path) -> None:
    """int8 had 8-bit weights until 7-bit ones: a knowledge base recorded so opens with
    the default and with int8 asked for, keeps its record, and embeds its new chunks as
    it embedded its old ones. Its record is rewritten here to make one."""
    seven = Embedder(precision=EmbeddingPrecision.INT8)
    kb = kb_on(tmp_path, seven)
    kb.upsert([doc(0)])
    kb.close()
    eight = seven.identity.removesuffix(", 7-bit weights")
    kv = SqliteKVStore(tmp_path / STATE_FILE)
    kv.put("embedding", {"value": eight}, collection=META)
    kv.commit()
    kv.close()
    for embedder in (Embedder(), Embedder(precision=EmbeddingPrecision.INT8)):
        kb = kb_on(tmp_path, embedder)
        assert embedder.identity == eight and embedder.runtime.weight_bits == 8
        kb.upsert([doc(1)])
        kb.close()
    kv = SqliteKVStore(tmp_path / STATE_FILE)
    assert kv.get("embedding", collection=META) == {"value": eight}
    kv.close()


def test_a_knowledge_base_keeps_its_precision_and_refuses_another_asked_for(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Embedded in the precision that is not this host's default, asked for: float32
    where int8 is the default (a knowledge base from before int8 was), int8 elsewhere.
    An embedder left to the default follows it; one asked for bfloat16 is refused,
    with a message that names both and what to do."""
    default = default_precision()
    other = EmbeddingPrecision.INT8
    if default is EmbeddingPrecision.INT8:
        other = EmbeddingPrecision.FLOAT32
    recorded = Embedder(precision=other)
    kb = kb_on(tmp_path, recorded)
    kb.upsert([doc(0)])
    expected = recorded.embed_texts([doc(0).text])
    kb.close()
    following = Embedder()
    assert following.precision is default and following.follows
    kb = kb_on(tmp_path, following)
    assert following.precision is other
    np.testing.assert_array_equal(following.embed_texts([doc(0).text]), expected)
    assert kb.retrieve(following.embed_query(doc(0).text), top_k=1)[0].doc_id == "doc-0"
    kb.close()
    # Only the precision differs (never loaded: open embeds nothing).
    bf16 = Embedder(model_path=embedder.model_path, precision=EmbeddingPrecision.BFLOAT16)
    with pytest.raises(EmbeddingMismatchError, match="torch bfloat16") as refused:
        kb_on(tmp_path, bf16)
    assert f"embedded with {recorded.identity}, and" in str(refused.value)
    assert "unset WARMRAG_EMBEDDING_PRECISION" in str(refused.value)
    assert "re-ingest the documents into a new data folder" in str(refused.value)
