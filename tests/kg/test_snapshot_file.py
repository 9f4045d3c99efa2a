"""The snapshot saved at a clean close (``kg.snapshot_file``): the next start reads it
back instead of every row, it equals the one the rows give, a write removes it first,
so a crash never leaves a stale one, and a damaged one is ignored."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import kg.snapshot_file
import kg.store
from kg import EmbedFn, KnowledgeGraph
from kg.graph_file import GraphFile, GraphRows
from kg.snapshot_file import FILE
from tests.kg.kg_testdata import supplied
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)


def rows_read(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, bool]]:
    """(folder, with its vectors) of each read of the rows from here on."""
    calls: list[tuple[Path, bool]] = []
    read = GraphFile.read

    def counting(self: GraphFile, legacy: Any = None, vectors: bool = True) -> GraphRows:
        calls.append((self._folder, vectors))
        return read(self, legacy, vectors)

    monkeypatch.setattr(GraphFile, "read", counting)
    return calls


def test_a_start_after_a_clean_close_reads_the_snapshot_back(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved.close()
    assert (saved.folder / FILE).is_file()
    held = kg.store.KnowledgeGraph._build_graph
    monkeypatch.setattr(kg.store.KnowledgeGraph, "_build_graph", lambda self: None)
    reads = rows_read(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert reads == []  # what a start waits for read no row
    assert_same_snapshot(again.snapshot, saved.snapshot)
    assert again.document_versions() == saved.document_versions()
    assert again.document_ids() == saved.document_ids()
    monkeypatch.setattr(kg.store.KnowledgeGraph, "_build_graph", held)
    # The rows are read when the graph is first needed, and it edits as the original;
    # the vectors are the snapshot's, not read from the file again.
    for graph in (again, saved):
        assert graph.triples_for_document("curie")
        graph.remove_documents(["paris"])
    assert reads == [(saved.folder, False)]
    assert_same_snapshot(again.snapshot, saved.snapshot)


def test_a_file_changed_after_a_snapshot_start_is_indexed_again(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another writer (never the service: one process holds the folder) changes the file
    between a start from the snapshot and its first change: that change reads the rows
    and indexes them again rather than patch a snapshot that no longer matches them."""
    saved.close()
    again = KnowledgeGraph(saved.folder, embed_fn, load=False)
    again.load(prepare=False)  # the service's way: the first change reads the rows
    saved.remove_documents(["paris"])  # the other writer
    reads = rows_read(monkeypatch)
    again.remove_documents(["curie"])
    assert "changed since the start" in caplog.text
    assert reads == [(saved.folder, False), (saved.folder, True)]
    assert again.document_ids() == ["facts", "more"]
    assert_same_snapshot(again.snapshot, KnowledgeGraph(saved.folder, embed_fn).snapshot)


def test_a_write_removes_the_snapshot_so_a_crash_never_reads_a_stale_one(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
) -> None:
    saved.close()
    again = KnowledgeGraph(saved.folder, embed_fn)
    again.replace_documents(
        {"new": supplied("new", ("Lyon", "lies on", "Rhone"))}, {"new": "v-new"}
    )
    assert not (saved.folder / FILE).exists()
    # No close: the process died. The next start builds from the rows, with the change.
    after_crash = KnowledgeGraph(saved.folder, embed_fn)
    assert after_crash.document_versions()["new"] == "v-new"
    assert_same_snapshot(after_crash.snapshot, again.snapshot)


def test_a_damaged_or_foreign_snapshot_is_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    saved.close()
    (saved.folder / FILE).write_bytes(b"not a snapshot")
    (saved.folder / ".snapshot-left-by-a-crash.npz").write_bytes(b"partial")
    with caplog.at_level(logging.WARNING, logger="kg.snapshot_file"):
        again = KnowledgeGraph(saved.folder, embed_fn)
    assert "ignoring the saved snapshot" in caplog.text
    assert_same_snapshot(again.snapshot, saved.snapshot)
    assert not (saved.folder / ".snapshot-left-by-a-crash.npz").exists()


def test_a_snapshot_of_an_older_format_is_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start after an upgrade that changed the saved fields builds from the rows."""
    monkeypatch.setattr(kg.snapshot_file, "FORMAT", 1)
    saved.close()
    monkeypatch.undo()
    reads = rows_read(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="kg.snapshot_file"):
        again = KnowledgeGraph(saved.folder, embed_fn)
    assert "(format 1)" in caplog.text and reads == [(saved.folder, True)]
    assert_same_snapshot(again.snapshot, saved.snapshot)


def test_a_snapshot_without_its_graph_file_is_not_read(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
) -> None:
    """An operator who deletes graph.sqlite3 alone gets an empty graph, not the old one."""
    saved.close()
    (saved.folder / "graph.sqlite3").unlink()
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert again.edge_count == 0 and again.document_versions() == {}


def test_a_graph_loaded_unprepared_builds_for_its_first_change(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
) -> None:
    saved.close()
    graph = KnowledgeGraph(saved.folder, embed_fn, load=False)
    graph.load(prepare=False)
    assert not graph.wait_prepared(timeout=0)  # no thread was started
    graph.remove_documents(["paris"])  # builds it first, in this thread
    assert graph.wait_prepared(timeout=0) and "paris" not in graph.document_ids()
