"""The embedded default's vector index: a real Qdrant Edge shard in its child process,
the move from Qdrant local mode, and what a stopped index process does to callers."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from rag.knowledge import edge_worker
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.edge import EdgeIndex, VectorIndexError, migrate_local_mode
from rag.knowledge.embedding import EMBEDDING_DIM, Embedder
from rag.knowledge.models import DocumentIn
from rag.knowledge.state import KBState

DOCS = [
    DocumentIn(id="curie", text="Marie Curie discovered polonium and radium in Paris."),
    DocumentIn(id="river", text="The Amazon River empties into the Atlantic Ocean in Brazil."),
    DocumentIn(
        id="git",
        text="git rebase replays commits on top of another base; git merge joins histories.",
    ),
]


def edge_kb(data: Path, embedder: Embedder, *, migrate: bool = False) -> KnowledgeBase:
    index = EdgeIndex(
        data / "edge",
        EMBEDDING_DIM,
        migrate_from=(data / "qdrant", "warmrag") if migrate else None,
    )
    return KnowledgeBase(data, index, embedder, chunk_tokens=128)


def top_ids(kb: KnowledgeBase, question: str) -> list[str]:
    return [p.chunk_id for p in kb.retrieve(kb.embedder.embed_query(question), 3)]


RADIUM = "Who discovered radium?"


def filled(data: Path, embedder: Embedder) -> tuple[KnowledgeBase, list[str]]:
    """A knowledge base on Edge with ``DOCS``, and its top chunks for ``RADIUM``."""
    kb = edge_kb(data, embedder)
    kb.upsert(DOCS)
    return kb, top_ids(kb, RADIUM)


def test_chunks_survive_a_restart_and_an_update_replaces_them(
    tmp_path: Path, embedder: Embedder
) -> None:
    kb, before = filled(tmp_path, embedder)
    assert kb.retrieve(embedder.embed_query(RADIUM), 1)[0].doc_id == "curie"
    kb.close()

    kb = edge_kb(tmp_path, embedder)  # a new process loads the shard from disk
    assert top_ids(kb, RADIUM) == before
    assert kb.count_chunks() == sum(len(kb.chunk_ids(d.id)) for d in DOCS)
    old = set(kb.chunk_ids("curie"))
    kb.upsert([DocumentIn(id="curie", text="Marie Curie won two Nobel prizes.")])
    stored = {i for i, _ in kb.index.payloads(["doc_id"])}
    assert not old & stored and set(kb.chunk_ids("curie")) <= stored
    kb.delete("river")
    hits = kb.retrieve(embedder.embed_query("Where does the Amazon River end?"), 3)
    assert all(p.doc_id != "river" for p in hits)
    kb.close()


def test_a_shard_searches_with_one_thread_also_when_made_before_the_setting(
    tmp_path: Path, embedder: Embedder
) -> None:
    """``SEARCH_THREADS`` in a new shard's config, and written into that of a shard made
    before it (its key absent) at its next load, which keeps its chunks and the rest of
    its config."""
    config_file = tmp_path / "edge" / "edge_config.json"
    kb, before = filled(tmp_path, embedder)
    kb.close()
    made = json.loads(config_file.read_text())
    assert made["max_search_threads"] == edge_worker.SEARCH_THREADS == 1
    del made["max_search_threads"]
    config_file.write_text(json.dumps(made))
    kb = edge_kb(tmp_path, embedder)
    assert top_ids(kb, RADIUM) == before
    kb.close()
    loaded = json.loads(config_file.read_text())  # Edge adds the payload's defaults
    assert loaded["max_search_threads"] == 1 and {k: loaded[k] for k in made} == made


def test_chunks_an_interrupted_write_left_are_removed_at_open_without_a_full_scan(
    tmp_path: Path, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injected: the write dies between adding its chunks to the shard and its
    commit, with no rollback (as a kill leaves it). The next start removes them, having
    checked the chunks writes logged as loose, never reading every point back."""
    kb = edge_kb(tmp_path, embedder)
    kb.upsert(DOCS[:1])
    with monkeypatch.context() as patch:
        patch.setattr(KnowledgeBase, "_rollback", lambda self: None)

        def killed(*args: object) -> None:
            raise RuntimeError("killed before the commit")

        patch.setattr(KBState, "put", killed)
        with pytest.raises(RuntimeError, match="killed"):
            kb.upsert([DOCS[1]])
    assert kb.count_chunks() > len(kb.chunk_ids("curie"))  # the orphan is in the shard
    kb.close()

    with monkeypatch.context() as patch:
        patch.setattr(EdgeIndex, "payloads", lambda self, keys: pytest.fail("a full scan"))
        kb = edge_kb(tmp_path, embedder)
        assert kb.count_chunks() == len(kb.chunk_ids("curie"))
        assert kb._state.loose() == []
    kb.close()


def test_a_local_mode_folder_moves_into_the_shard_once_and_is_kept(
    tmp_path: Path, embedder: Embedder
) -> None:
    local = KnowledgeBase(
        tmp_path, QdrantClient(path=str(tmp_path / "qdrant")), embedder, chunk_tokens=128
    )
    local.upsert(DOCS)
    questions = [RADIUM, "How do I replay commits?", "Amazon River"]
    expected = [top_ids(local, q) for q in questions]
    chunks = local.count_chunks()
    local.close()

    seen: list[tuple[int, int]] = []

    def interrupted(done: int, total: int) -> None:
        seen.append((done, total))
        raise KeyboardInterrupt  # a stop part-way through the copy

    index = EdgeIndex(tmp_path / "edge", EMBEDDING_DIM)
    with pytest.raises(KeyboardInterrupt):
        migrate_local_mode(tmp_path / "qdrant", index, "warmrag", interrupted)
    assert seen == [(chunks, chunks)]
    assert (tmp_path / "qdrant").is_dir() and not edge_worker.has_shard(tmp_path / "edge")

    kb = edge_kb(tmp_path, embedder, migrate=True)  # the next start moves it all
    assert kb.count_chunks() == chunks
    assert [top_ids(kb, q) for q in questions] == expected
    assert not (tmp_path / "qdrant").exists() and (tmp_path / "qdrant.migrated").is_dir()
    assert not (tmp_path / "edge.partial").exists()
    kb.upsert([DocumentIn(id="new", text="Copper conducts electricity.")])
    kb.close()

    kb = edge_kb(tmp_path, embedder, migrate=True)  # nothing left to move
    assert kb.count_chunks() == chunks + len(kb.chunk_ids("new"))
    kb.close()


def test_a_stopped_index_process_fails_one_call_and_starts_again(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Fault injected: the index's process is killed (SIGKILL) between two searches."""
    kb, before = filled(tmp_path, embedder)
    index = kb.index
    assert isinstance(index, EdgeIndex)
    os.kill(index._call(os.getpid), signal.SIGKILL)
    with pytest.raises(VectorIndexError):
        top_ids(kb, RADIUM)
    assert top_ids(kb, RADIUM) == before  # reloaded from disk
    kb.close()


def test_building_hnsw_leaves_the_callers_process_running(tmp_path: Path) -> None:
    """The build holds its own process's GIL for seconds; the caller's threads (the
    service's event loop) must keep running meanwhile. Measured as how often a thread
    that sleeps 10 ms woke up during the build, against how often it could have."""
    index = EdgeIndex(tmp_path / "edge", 64, indexing_kb=1000)
    index.open()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((6000, 64)).astype(np.float32)  # 1.5 MB: past 1,000 KB
    index.upsert_rows([(str(uuid.UUID(int=i + 1)), v.tolist(), {}) for i, v in enumerate(vectors)])
    wakes, stop = [0], threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            time.sleep(0.01)
            wakes[0] += 1

    thread = threading.Thread(target=ticker)
    thread.start()
    started = time.perf_counter()
    built = index._call(edge_worker.optimize)
    elapsed = time.perf_counter() - started
    stop.set()
    thread.join()
    index.close()
    assert built, "nothing was indexed: the test did not exercise a build"
    assert wakes[0] >= 0.5 * elapsed / 0.011, (wakes[0], elapsed)
