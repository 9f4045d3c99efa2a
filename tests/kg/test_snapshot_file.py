"""The snapshot saved at a clean close (``kg.snapshot_file``): the next start reads it
back instead of every row, it equals the one the rows give, a write removes it first,
so a crash never leaves a stale one, and a damaged one is ignored."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import kg.axes_file
import kg.snapshot_file
import kg.store
from kg import EmbedFn, KnowledgeGraph
from kg.edge_lists import ChunkIndex
from kg.embeddings import EmbeddingTable
from kg.index import INDEXED_LISTS
from kg.snapshot_file import FILE, VECTOR_FILE
from kg.subgraph import SubgraphSelector
from tests.kg.kg_testdata import supplied
from tests.kg.snapshot_checks import (
    SNAPSHOT_FILES,
    assert_coded,
    codes_made,
    rows_read,
    saves_made,
)
from tests.kg.test_file_matrix import mapped_kib, needs_smaps
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)


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
    # No row is read for changes either, and the graph edits as the original; the
    # vectors are the snapshot's, not read from the file again.
    for graph in (again, saved):
        assert graph.triples_for_document("curie")
        graph.remove_documents(["paris"])
    assert reads == []
    assert_same_snapshot(again.snapshot, saved.snapshot)


def test_a_save_runs_without_the_cyclic_collector(
    saved: KnowledgeGraph,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Encoding a million documents' versions started collections that took half of a
    save at 1,000,000 chunks; the collector runs again after."""
    enabled: list[bool] = []
    write = kg.snapshot_file.write_npz

    def watching(entries: Any, out: Any) -> None:
        enabled.append(gc.isenabled())
        write(entries, out)

    monkeypatch.setattr(kg.snapshot_file, "write_npz", watching)
    assert gc.isenabled()
    saved.close()
    assert enabled == [False] and gc.isenabled()
    assert (saved.folder / FILE).is_file()


def test_a_stop_after_a_start_that_changed_nothing_keeps_the_snapshot(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing written since the snapshot was read back: the stop saves nothing (the
    same snapshot stays, and the next start reads it); one change, and it saves again."""
    saved.close()
    files = sorted(p.name for p in saved.folder.iterdir())
    stamp = (saved.folder / FILE).stat().st_mtime_ns
    saves = saves_made(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert again.wait_prepared(timeout=30)
    assert again.triples_for_document("curie")  # read, not written
    again.close()
    assert saves == [] and (saved.folder / FILE).stat().st_mtime_ns == stamp
    assert sorted(p.name for p in saved.folder.iterdir()) == files
    reads = rows_read(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert reads == []
    assert_same_snapshot(again.snapshot, saved.snapshot)
    again.remove_documents(["paris"])
    again.close()
    assert saves == [saved.folder]
    later = KnowledgeGraph(saved.folder, embed_fn)
    assert reads == [] and "paris" not in later.document_ids()
    assert_same_snapshot(later.snapshot, again.snapshot)


def test_a_stop_saves_the_snapshot_again_where_the_axes_changed(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The codes a snapshot holds were made by the folder's axes: axes written after
    the start read it back (cells fit again) make the stop save it again."""
    saved.close()
    saves = saves_made(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    (saved.folder / kg.axes_file.FILE).write_bytes(b"axes written since")
    again.close()
    assert saves == [saved.folder]


def test_a_file_changed_after_a_snapshot_start_is_indexed_again(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another writer (never the service: one process holds the folder) changes the file
    between a start from the snapshot and its first change: that change finds the file's
    count of edges and versions changed, and reads the rows and indexes them again rather
    than patch a snapshot that no longer matches them."""
    saved.close()
    again = KnowledgeGraph(saved.folder, embed_fn, load=False)
    again.load(prepare=False)  # the service's way: the first change reads the rows
    saved.remove_documents(["paris"])  # the other writer
    reads = rows_read(monkeypatch)
    again.remove_documents(["curie"])
    assert "changed since the start" in caplog.text
    assert reads == [(saved.folder, True)]
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


def test_a_snapshot_reads_each_distinct_string_once_and_shares_it(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
) -> None:
    """The lists of repeated strings are saved as indexes into one table: read back,
    equal strings are one object within and across the lists (an edge's entity name
    and the entity's own, a document's id in each of its triples), as the start that
    shared each string (``sys.intern``) left them."""
    saved.close()
    snap = KnowledgeGraph(saved.folder, embed_fn).snapshot
    assert_same_snapshot(snap, saved.snapshot)
    objects: dict[str, int] = {}
    for name in INDEXED_LISTS:
        for value in getattr(snap, name):
            if value is not None:
                assert objects.setdefault(value, id(value)) == id(value), (name, value)
    assert set(snap.edge_subject_name) & set(snap.node_names)  # so shared across lists
    # The chunks' index, made from the saved indexes, is the one the lists give.
    built = ChunkIndex.of(snap.edge_doc, snap.edge_chunk)
    assert None in snap.edge_chunk and len(built.documents) > 2
    assert list(snap.chunks.documents.items()) == list(built.documents.items())
    for name in ("edge_chunk", "ptr", "order"):
        np.testing.assert_array_equal(getattr(snap.chunks, name), getattr(built, name))


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


def test_the_first_change_after_a_read_back_looks_up_only_its_own_keys(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tables adopt the snapshot's own rows, so the snapshot's vectors are bound to
    them (``GraphSnapshot.bound_to``): the change splices rows, and does not look up
    every entity and fact (4.6 s at 1,000,000 chunks)."""
    saved.close()
    graph = KnowledgeGraph(saved.folder, embed_fn, load=False)
    graph.load(prepare=False)
    looked_up: list[int] = []
    rows_for = EmbeddingTable.rows_for

    def counting(table: EmbeddingTable, keys: Any) -> np.ndarray:
        looked_up.append(len(keys))
        return rows_for(table, keys)

    monkeypatch.setattr(EmbeddingTable, "rows_for", counting)
    lyon = {"lyon": supplied("lyon", ("Lyon", "lies on", "Rhone"), ("Lyon", "hosts", "Fete"))}
    graph.replace_documents(lyon, {"lyon": "v1"})
    assert looked_up and max(looked_up) <= 3  # the new entities, then the new facts
    saved.replace_documents(lyon, {"lyon": "v1"})
    assert_same_snapshot(graph.snapshot, saved.snapshot)


def test_a_start_maps_the_vectors_and_changes_write_past_them(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vectors read back are the files' pages, not copies in the process's memory;
    the tables adopt them as they are, and changes write their vectors after them. A save
    writes them a few rows at a time (here 3), across the mapped part and the new rows."""
    monkeypatch.setattr(kg.saved_vectors, "_BLOCK_ROWS", 3)
    saved.close()
    files = sorted(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))
    assert sorted(p.name.split("-", 2)[2] for p in files) == sorted(SNAPSHOT_FILES)
    coded = codes_made(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    snap = again.snapshot
    assert isinstance(snap.node_vectors.matrix.tail, np.memmap)
    assert isinstance(snap.edge_vectors.matrix.tail, np.memmap)
    assert_coded(again)  # the entities are coded at the load, before any change
    assert coded == [len(snap.node_keys)]
    again.remove_documents(["paris"])  # the tables adopt the mapped matrices, and codes
    assert coded == [len(snap.node_keys)]  # not made a second time
    loaded, adopted = snap.node_vectors.matrix.codes, again.snapshot.node_vectors.matrix.codes
    assert loaded is not None and adopted is not None and adopted[0] is loaded[1]
    again.replace_documents({"new": supplied("new", ("Lyon", "lies on", "Rhone"))})
    for vectors in (again.snapshot.node_vectors, again.snapshot.edge_vectors):
        assert isinstance(vectors.matrix.base, np.memmap) and len(vectors.matrix.tail)
    assert_coded(again)
    assert not (saved.folder / FILE).exists()  # the write discarded the saved snapshot
    assert all(path.exists() for path in files)  # its vector files kept for the save
    saved.remove_documents(["paris"])
    saved.replace_documents({"new": supplied("new", ("Lyon", "lies on", "Rhone"))})
    assert_same_snapshot(again.snapshot, saved.snapshot)
    # A clean close saves both parts; the next start reads the same graph back.
    again.close()
    assert_same_snapshot(KnowledgeGraph(saved.folder, embed_fn).snapshot, saved.snapshot)


@needs_smaps
def test_a_selection_after_a_start_maps_no_page_of_the_vector_files(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
) -> None:
    """The entities are coded and the candidates' rows read from the files
    (``kg.file_matrix``): at 1M chunks, reading them through the mappings kept 5 GB of
    the triple vectors' pages in the process's RSS after 300 questions."""
    saved.close()
    again = KnowledgeGraph(saved.folder, embed_fn)
    question = "Where was Marie Curie born?"
    triples = SubgraphSelector(again).select(question, embed_fn([question])[0])
    assert triples  # it read entity and triple rows
    files = [p for kind in ("nodes", "triples") for p in saved.folder.glob(f"*-{kind}.npy")]
    assert len(files) == 2 and [mapped_kib(path) for path in files] == [0, 0]
    assert triples == SubgraphSelector(saved).select(question, embed_fn([question])[0])


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_a_start_keeps_one_string_for_each_text_and_entity_key(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    stop: str,
) -> None:
    """The snapshot's triple texts and entity keys are the embedding tables' own key
    objects, not equal copies, however the start read them: after a crash the copies
    held 62 MiB at 323,000 triples (the probe in docs/performance.md)."""
    if stop == "clean":
        saved.close()
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert again.wait_prepared(timeout=30)
    snap = again.snapshot
    tables = {"texts": again._tables.triples, "keys": again._tables.nodes}
    held = {name: {id(key) for key in table} for name, table in tables.items()}
    assert snap.edge_text and all(id(text) in held["texts"] for text in snap.edge_text)
    assert snap.node_keys and all(id(key) in held["keys"] for key in snap.node_keys)
    assert_same_snapshot(snap, saved.snapshot)
