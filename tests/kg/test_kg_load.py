"""A start: the snapshot chats read is built from the file's rows (or read back), and
what changes need besides is done after it, in a thread (``KnowledgeGraph.load``)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.store
from durable import forget_cached_pages
from kg import EmbedFn, KnowledgeGraph, TripleExtractor
from kg.embeddings import EmbeddingTable
from kg.graph_file import GRAPH_DB_FILE
from kg.index import GraphSnapshot
from kg.vector_rows import VectorRows
from tests.kg.kg_testdata import CountingEmbed, corpus_triples, snapshot_content, supplied


def assert_same_snapshot(got: GraphSnapshot, want: GraphSnapshot) -> None:
    assert snapshot_content(got) == snapshot_content(want)


@pytest.fixture
def saved(tmp_path: Path, embed_fn: EmbedFn, extractor: TripleExtractor) -> KnowledgeGraph:
    """A graph in ``tmp_path/kg`` with extracted triples (chunk ids), supplied ones (none),
    one fact stated by two documents and a document removed again."""
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    documents = {doc: corpus_triples(extractor, doc) for doc in ("curie", "paris", "einstein")}
    documents["facts"] = supplied(
        "facts", ("Marie Curie", "born in", "Warsaw"), ("Paris", "capital of", "France")
    )
    documents["more"] = supplied("more", ("marie curie", "born in", "Warsaw"))
    graph.replace_documents(documents, {d: f"v-{d}" for d in documents})
    graph.remove_documents(["einstein"])
    return graph


def test_a_start_builds_the_snapshot_a_change_builds(
    saved: KnowledgeGraph, embed_fn: EmbedFn
) -> None:
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert_same_snapshot(again.snapshot, saved.snapshot)
    assert again.document_ids() == saved.document_ids() == ["curie", "facts", "more", "paris"]
    assert again.document_versions() == saved.document_versions()
    assert (again.node_count, again.edge_count) == (saved.node_count, saved.edge_count)
    for doc in saved.document_ids():
        assert again.triples_for_document(doc) == saved.triples_for_document(doc)
    # And the graph after the start edits as the one that was never closed.
    for graph in (saved, again):
        graph.remove_documents(["paris"])
    assert_same_snapshot(again.snapshot, saved.snapshot)
    assert again.search_entities("curie") == saved.search_entities("curie")


def test_reads_do_not_wait_for_the_graph_and_a_change_does(
    saved: KnowledgeGraph, embed_fn: EmbedFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a clean stop the embedding tables take the snapshot's vectors in a thread;
    that step is held (an event it waits on) to show what waits for it."""
    saved.close()
    release = threading.Event()
    building = threading.Event()
    build = kg.store.snapshot_file.table_vectors

    def held(*rows: Any) -> Any:
        building.set()
        assert release.wait(timeout=60)
        return build(*rows)

    monkeypatch.setattr(kg.store.snapshot_file, "table_vectors", held)
    embed = CountingEmbed(embed_fn)
    again = KnowledgeGraph(saved.folder, embed)
    assert building.wait(timeout=60)
    # What a start (the sync's reconcile) and chats read answers while the build holds on.
    assert again.document_ids() == ["curie", "facts", "more", "paris"]
    assert again.document_versions()["paris"] == "v-paris"
    assert again.edge_count == saved.edge_count
    assert_same_snapshot(again.snapshot, saved.snapshot)

    done = threading.Event()

    def change() -> None:
        again.replace_documents(
            {"new": supplied("new", ("Pierre Curie", "married", "Marie Curie"))}, {"new": "v1"}
        )
        done.set()

    writer = threading.Thread(target=change)
    writer.start()
    assert not done.wait(timeout=0.5)  # the change waits for the graph
    release.set()
    assert done.wait(timeout=60)
    writer.join()
    assert again.document_ids() == ["curie", "facts", "more", "new", "paris"]
    assert [t.subject for t in again.triples_for_document("new")] == ["Pierre Curie"]
    assert again.triples_for_document("facts") == saved.triples_for_document("facts")
    assert embed.texts == ["Pierre Curie", "Pierre Curie married Marie Curie"]


def test_a_failed_build_is_logged_and_done_by_the_next_change(
    saved: KnowledgeGraph,
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Injected: the first preparation (after a clean stop) raises MemoryError."""
    saved.close()
    build = kg.store.snapshot_file.table_vectors
    failed = threading.Event()
    calls: list[int] = []

    def once(*rows: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            failed.set()
            raise MemoryError("injected")
        return build(*rows)

    monkeypatch.setattr(kg.store.snapshot_file, "table_vectors", once)
    with caplog.at_level(logging.ERROR, logger="kg.store"):
        again = KnowledgeGraph(saved.folder, embed_fn)
        assert failed.wait(timeout=60)
        again.remove_documents(["paris"])  # prepares the graph first, then applies
    assert "preparing the graph for changes failed" in caplog.text
    assert len(calls) == 2
    assert again.document_ids() == ["curie", "facts", "more"]
    saved.remove_documents(["paris"])
    assert_same_snapshot(again.snapshot, saved.snapshot)


def test_a_table_adopts_its_matrix_and_grows_past_it() -> None:
    matrix = np.eye(3, 4, dtype=np.float32)
    table = EmbeddingTable.adopt(["a", "b", "c"], matrix)
    assert np.shares_memory(table.gather(["a"]), matrix) is False  # gather copies out
    np.testing.assert_array_equal(table.gather(["c", "a"]), matrix[[2, 0]])
    rows = table.rows_for(["a", "b"])
    table.add(["d", "a"], np.ones((2, 4), np.float32))  # grows past the adopted rows
    np.testing.assert_array_equal(table.gather(["a", "b", "d"]), [[1] * 4, matrix[1], [1] * 4])
    table.discard(["b"])
    table.add(["e"], np.full((1, 4), 2, np.float32))  # a new row: a's old and b's stay
    assert len(table) == 4 and "b" not in table
    np.testing.assert_array_equal(table.matrix[rows], [matrix[0], matrix[1]])
    with pytest.raises(ValueError, match="repeat"):
        EmbeddingTable.adopt(["a", "a"], np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="float32"):
        EmbeddingTable.adopt(["a"], np.zeros((2, 4), np.float32))


def test_a_table_over_a_read_only_matrix_keeps_it_and_compacts_only_its_own_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mapped matrix (read-only) stays the table's base, never copied: new rows go
    after it, and compaction moves only the rows in memory, keeping the base's numbers."""
    monkeypatch.setattr(EmbeddingTable, "_MIN_DEAD", 0)
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    base.flags.writeable = False
    table = EmbeddingTable.adopt(["a", "b", "c"], base)
    assert table.matrix.base is base and len(table.matrix.tail) == 0
    table.add(["d", "e", "b"], np.full((3, 4), 7, np.float32))  # b's base row is dropped
    np.testing.assert_array_equal(table.gather(["c", "d", "b"]), [base[2], [7] * 4, [7] * 4])
    rows = table.rows_for(["a", "c"])
    token = table.token
    table.discard(["d", "e"])  # two of the three rows in memory dropped: compacted
    assert table.token is not token and table.matrix.base is base
    assert len(table.matrix.tail) == 1 and table.rows_for(["b"]).tolist() == [3]
    np.testing.assert_array_equal(table.rows_for(["a", "c"]), rows)
    np.testing.assert_array_equal(table.gather(["a", "b", "c"]), [base[0], [7] * 4, base[2]])
    vectors = VectorRows.of(table, ["c", "b"])
    np.testing.assert_array_equal(vectors.dot(np.ones(4, np.float32)), [38, 28])
    table.discard(["a", "c"])  # the base's rows: dropped, not compacted into memory
    assert table.matrix.base is base


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_a_start_logs_once_that_the_graph_is_ready_for_changes(
    saved: KnowledgeGraph,
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    stop: str,
) -> None:
    """Whether a start left work for the first change (after a clean stop) or none
    (after a crash): ``bench.service_start`` waits for this line after that change."""
    if stop == "clean":
        saved.close()
    with caplog.at_level(logging.INFO, logger="kg.store"):
        again = KnowledgeGraph(saved.folder, embed_fn, load=False)
        again.load(prepare=False)
        again.remove_documents(["paris"])
        again.remove_documents(["curie"])
    assert sum("ready for changes" in r.getMessage() for r in caplog.records) == 1


def test_a_start_from_the_rows_drops_the_scanned_file_from_the_page_cache(
    saved: KnowledgeGraph, embed_fn: EmbedFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start after a crash scans every vector of the graph's file, once: its pages are
    then dropped (``POSIX_FADV_DONTNEED``) after each kind's scan, so they do not push
    the snapshot's vector files, which questions read, out of the page cache."""
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise here")
    advise = os.posix_fadvise
    dropped: list[str] = []

    def recording(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_DONTNEED:
            dropped.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert dropped == [GRAPH_DB_FILE, GRAPH_DB_FILE]  # the nodes' scan, the triples'
    assert_same_snapshot(again.snapshot, saved.snapshot)


def test_forgetting_a_file_s_cached_pages_keeps_its_content(tmp_path: Path) -> None:
    path = tmp_path / "rows.bin"
    data = os.urandom(1 << 20)
    path.write_bytes(data)
    forget_cached_pages(path)
    assert path.read_bytes() == data
    forget_cached_pages(tmp_path / "gone.bin")  # a hint: nothing to do, no error
