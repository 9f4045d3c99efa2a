"""The snapshot saved at a clean close (``kg.snapshot_file``): the next start reads it
back instead of every row, it equals the one the rows give, a write removes it first,
so a crash never leaves a stale one, and a damaged one is ignored."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.axes_file
import kg.graph_file
import kg.row_files
import kg.saved_vectors
import kg.snapshot_file
import kg.store
import kg.table_file
from kg import EmbedFn, KnowledgeGraph
from kg.edge_lists import ChunkIndex
from kg.embeddings import EmbeddingTable
from kg.graph_file import GraphFile, GraphRows
from kg.index import INDEXED_LISTS
from kg.int8_rows import Int8Rows
from kg.snapshot_file import FILE, VECTOR_FILE
from kg.subgraph import SubgraphSelector
from tests.kg.kg_testdata import supplied
from tests.kg.test_file_matrix import mapped_kib, needs_smaps
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)


def rows_read(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, bool]]:
    """(folder, with its vectors) of each read of the rows from here on."""
    calls: list[tuple[Path, bool]] = []
    read = GraphFile.read

    def counting(
        self: GraphFile, legacy: Any = None, vectors: bool = True, sink: Any = None
    ) -> GraphRows:
        calls.append((self._folder, vectors))
        return read(self, legacy, vectors, sink)

    monkeypatch.setattr(GraphFile, "read", counting)
    return calls


def saves_made(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folder of each snapshot saved from here on."""
    saves: list[Path] = []
    save = kg.snapshot_file.save

    def counting(folder: Path, *args: Any) -> None:
        saves.append(folder)
        save(folder, *args)

    monkeypatch.setattr(kg.snapshot_file, "save", counting)
    return saves


def codes_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of rows of each matrix coded from here on (``Int8Rows.of``)."""
    coded: list[int] = []
    code = Int8Rows.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Int8Rows], matrix: np.ndarray) -> Int8Rows:
        coded.append(len(matrix))
        return code(cls, matrix)

    monkeypatch.setattr(Int8Rows, "of", classmethod(counting))
    return coded


def assert_coded(graph: KnowledgeGraph) -> None:
    """The entities' vectors have int8 codes for every row, mapped or in memory, whose
    estimates hold (``kg.int8_rows``); the triple texts' have none (no scan reads them all)."""
    nodes = graph.snapshot.node_vectors.matrix
    assert nodes.codes is not None and graph.snapshot.edge_vectors.matrix.codes is None
    assert [len(part) for part in nodes.codes] == [len(nodes.base), len(nodes.tail)]
    query = np.asarray(nodes[np.arange(len(nodes))]).sum(axis=0)
    query /= np.linalg.norm(query)
    estimates, slack = nodes.estimate(query)
    assert np.abs(estimates - nodes.dot(query)).max() <= slack


def assert_built_from_the_rows(
    graph: KnowledgeGraph,
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    warning: str,
) -> None:
    """A start on ``graph``'s folder warns, reads every row and vector, and builds the
    snapshot the graph has."""
    reads = rows_read(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="kg.snapshot_file"):
        again = KnowledgeGraph(graph.folder, embed_fn)
    assert warning in caplog.text and reads == [(graph.folder, True)]
    assert_same_snapshot(again.snapshot, graph.snapshot)


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
    assert_built_from_the_rows(saved, embed_fn, caplog, monkeypatch, "(format 1)")


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


def test_a_snapshot_whose_string_indexes_are_out_of_range_is_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved.close()
    path = saved.folder / FILE
    with np.load(path) as held:
        arrays = {name: held[name] for name in held.files}
    arrays["edge_doc_strings"][0] = 1 << 30
    with path.open("wb") as out:  # np.savez would add ".npz" to a name without it
        np.savez(out, **arrays)
    assert_built_from_the_rows(saved, embed_fn, caplog, monkeypatch, "not in the snapshot's table")


#: The files beside ``snapshot.npz`` of a graph too small for codes: its vectors, and its
#: table of strings (``kg.table_file``).
SNAPSHOT_FILES = ("nodes.npy", "triples.npy", "strings.npy", "string-ends.npy")

#: The saved entity codes' arrays of a row each (``kg.saved_codes``).
CODE_ROWS = ("lead", "lead_unit", "rest", "rest_unit", "rest_norm", "cell")


def as_format_6(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The saved snapshot's meta and arrays as format 6 saved them: the table of strings
    (its files removed here) and each edge's text in the JSON."""
    with np.load(folder / FILE) as held:
        arrays = {name: held[name] for name in held.files}
    meta = json.loads(arrays.pop("meta").tobytes())
    count, size = meta.pop("table")
    path_of = partial(kg.snapshot_file._file_path, folder)
    nones = tuple(arrays.pop("string_nones").tolist())
    table = kg.table_file.read(path_of, kg.table_file.SavedTable(meta["id"], count, size, nones))
    for kind in (kg.table_file.TEXT, kg.table_file.ENDS):
        path_of(meta["id"], kind).unlink()
    meta["edge_text"] = [table[i] for i in arrays.pop("edge_text_strings").tolist()]
    meta["strings"] = table
    meta["format"] = 6
    return meta, arrays


def as_format_5(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """As format 5 saved them: format 6's, with the entities' vector file (rewritten
    here) and codes (moved into the arrays) in node order, no ``node_rows``."""
    meta, arrays = as_format_6(folder)
    node_rows = arrays.pop("node_rows")
    assert not np.array_equal(node_rows, np.arange(len(node_rows)))  # not node order yet
    nodes = folder / VECTOR_FILE.format(id=meta["id"], kind="nodes")
    np.save(nodes, np.load(nodes)[node_rows])
    for name in CODE_ROWS:
        path = folder / VECTOR_FILE.format(id=meta["id"], kind=f"codes-{name}")
        if path.exists():
            arrays[f"entity_codes_{name}"] = np.load(path)[node_rows]
            path.unlink()
    meta["format"] = 5
    return meta, arrays


def as_format_4(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """As format 4 saved them: format 5's, with each list's strings in the JSON and no
    codes."""
    meta, arrays = as_format_5(folder)
    table = meta.pop("strings")
    for name in INDEXED_LISTS:
        if name != "edge_text":  # in the JSON already
            meta[name] = [table[i] for i in arrays.pop(f"{name}_strings").tolist()]
    meta["format"] = 4
    return meta, {k: v for k, v in arrays.items() if not k.startswith("entity_codes_")}


def write_snapshot(folder: Path, meta: dict[str, Any], arrays: dict[str, Any]) -> None:
    with (folder / FILE).open("wb") as out:
        np.savez(out, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)


@pytest.mark.parametrize("older", [as_format_6, as_format_5, as_format_4])
def test_a_snapshot_of_an_older_format_is_read_and_saved_again_as_the_current_one(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
    older: Callable[[Path], tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """A folder from before format 7 (the table of strings in the JSON), before format 6
    (also the entities' vectors in node order, without ``node_rows``) or before format 5
    (also each list's strings in the JSON, no codes) starts from its snapshot, not from
    the rows, and its stop saves the current format."""
    saved.close()
    write_snapshot(saved.folder, *older(saved.folder))
    reads, saves = rows_read(monkeypatch), saves_made(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert reads == []
    assert_same_snapshot(again.snapshot, saved.snapshot)
    again.close()
    assert saves == [saved.folder]
    with np.load(saved.folder / FILE) as held:
        assert json.loads(held["meta"].tobytes())["format"] == kg.snapshot_file.FORMAT
        assert "node_rows" in held.files
    assert_same_snapshot(KnowledgeGraph(saved.folder, embed_fn).snapshot, saved.snapshot)
    assert reads == []


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


@pytest.mark.parametrize("kind", ["nodes", "strings", "string-ends"])
@pytest.mark.parametrize("damage", ["missing", "truncated", "other-size"])
def test_vector_files_that_do_not_match_their_snapshot_are_ignored(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    caplog: pytest.LogCaptureFixture,
    damage: str,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crash between the vector files and ``snapshot.npz`` leaves the snapshot absent
    (it is renamed into place last); a file of its vectors, or of its table of strings,
    lost or damaged afterwards makes the start build from the rows, with a warning,
    never read vectors or strings that do not fit."""
    saved.close()
    path = next(saved.folder.glob(VECTOR_FILE.format(id="*", kind=kind)))
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        held = np.load(path)
        np.save(path, np.zeros((1, 8), np.float32) if kind == "nodes" else held[:-1])
    assert_built_from_the_rows(saved, embed_fn, caplog, monkeypatch, "ignoring the saved")


def test_a_save_cut_short_leaves_no_snapshot_and_no_stray_files(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The vector files are written first: a save that fails at ``snapshot.npz`` removes
    them, and files a crash left (named by no snapshot) go at the next save."""
    real = kg.snapshot_file.atomic_write

    def failing(path: Path, write: Any) -> None:
        if path.name == FILE:
            raise OSError(28, "No space left on device")
        real(path, write)

    monkeypatch.setattr(kg.snapshot_file, "atomic_write", failing)
    saved.close()  # logs the failure; the graph's file is whole
    monkeypatch.undo()
    assert not (saved.folder / FILE).exists()
    assert not list(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))
    again = KnowledgeGraph(saved.folder, embed_fn)  # built from the rows
    assert_same_snapshot(again.snapshot, saved.snapshot)
    stray = saved.folder / VECTOR_FILE.format(id="0123456789abcdef", kind="nodes")
    np.save(stray, np.zeros((2, 4), np.float32))  # a save a crash cut short
    again.close()
    assert (saved.folder / FILE).exists() and not stray.exists()
    assert len(list(saved.folder.glob(VECTOR_FILE.format(id="*", kind="*")))) == len(SNAPSHOT_FILES)


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


def test_a_save_that_fails_while_writing_its_arrays_leaves_nothing(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault injected: the disk fills after the JSON and a few arrays are written (each
    array goes out as it is made). No snapshot, no temporary file and no vector file
    is left; the next start builds from the rows and its stop saves a readable one."""
    real = np.lib.format.write_array
    written: list[int] = []

    def filling(member: Any, array: np.ndarray, **kwargs: Any) -> None:
        written.append(array.size)
        if len(written) == 4:
            raise OSError(28, "No space left on device")
        real(member, array, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", filling)
    saved.close()  # logs the failure
    monkeypatch.undo()
    assert len(written) == 4
    assert sorted(p.name for p in saved.folder.iterdir() if "snapshot" in p.name) == []
    reads = rows_read(monkeypatch)
    again = KnowledgeGraph(saved.folder, embed_fn)
    assert len(reads) == 1
    assert_same_snapshot(again.snapshot, saved.snapshot)
    again.close()
    with np.load(saved.folder / FILE) as held:
        assert {"meta", "edge_rows", "node_keys_strings"} <= set(held.files)
    assert_same_snapshot(KnowledgeGraph(saved.folder, embed_fn).snapshot, saved.snapshot)
