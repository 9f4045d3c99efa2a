"""A clean stop after a change grows the vector files the start mapped (the entities' and
the triples') instead of writing them whole again (``kg.saved_vectors.write_vectors``,
``kg.file_matrix.grow_file``): the next start reads the same graph back, rows no item
reads stay unread until they pass a share of the file, and a save that fails leaves no
snapshot."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.saved_vectors
import kg.snapshot_file
import kg.table_file
from kg import EmbedFn, KnowledgeGraph
from kg.embeddings import EmbeddingTable
from kg.file_matrix import FileMatrix
from kg.saved_vectors import distinct_rows
from kg.snapshot_file import FILE, VECTOR_FILE
from tests.kg.kg_testdata import supplied
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)

NEW = {"new": supplied("new", ("Lyon", "lies on", "Rhone"), ("Lyon", "lies in", "France"))}


KINDS = ("nodes", "triples")
TABLE_KINDS = (kg.table_file.TEXT, kg.table_file.ENDS)


def vector_file(folder: Path, kind: str) -> Path:
    """The folder's one vector file of ``kind``."""
    (path,) = folder.glob(VECTOR_FILE.format(id="*", kind=kind))
    return path


def opened(folder: Path, embed_fn: EmbedFn) -> KnowledgeGraph:
    """A graph started on ``folder``, ready for changes (no thread of its start is left
    to run into the next test)."""
    graph = KnowledgeGraph(folder, embed_fn)
    assert graph.wait_prepared(timeout=30)
    return graph


def closed_with_a_copy(graph: KnowledgeGraph, embed_fn: EmbedFn) -> KnowledgeGraph:
    """Close ``graph`` and return a graph on a copy of its folder, for reference: the
    changes the test makes to the folder's graph, made to it, give what the folder's
    next start must read back."""
    graph.close()
    copy = graph.folder.parent / "reference"
    shutil.copytree(graph.folder, copy)
    return opened(copy, embed_fn)


def change(graph: KnowledgeGraph) -> None:
    """Rows added (the new document's facts) and rows no edge reads any more (paris's)."""
    graph.replace_documents(NEW)
    graph.remove_documents(["paris"])


@pytest.mark.parametrize("start", ["snapshot", "rows"])
def test_a_stop_after_a_change_grows_the_file_the_start_mapped(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
    start: str,
) -> None:
    """After a start from the snapshot, or from the rows (as after a crash: the files are
    the ones the vectors were streamed to), a change and a clean stop: each vector file
    is the same file, renamed for the new snapshot, with the new rows after its own; the
    next start reads back the graph that was never closed, its rows no item reads left
    dropped, and grows the files again at its own stop."""
    monkeypatch.setattr(kg.saved_vectors, "_DEAD_SHARE", 1.0)  # always grown
    reference = closed_with_a_copy(saved, embed_fn)
    if start == "rows":
        kg.snapshot_file.discard(saved.folder)  # as after a crash
    graph = opened(saved.folder, embed_fn)
    before = {kind: vector_file(saved.folder, kind) for kind in KINDS}
    inodes = {kind: path.stat().st_ino for kind, path in before.items()}
    rows = {kind: len(np.load(path, mmap_mode="r")) for kind, path in before.items()}
    keys = set(graph.snapshot.node_keys)
    table = graph.snapshot.strings  # None after a start from the rows
    assert (table is not None and table.saved is not None) == (start == "snapshot")
    strings = {k: vector_file(saved.folder, k).stat().st_ino for k in TABLE_KINDS if table}
    change(graph)
    new_keys, gone_keys = set(graph.snapshot.node_keys) - keys, keys - set(graph.snapshot.node_keys)
    assert new_keys and gone_keys  # entities added, and paris's alone dropped
    assert not (saved.folder / FILE).exists() and all(p.exists() for p in before.values())
    graph.close()
    grown = {kind: vector_file(saved.folder, kind) for kind in KINDS}
    assert all(grown[k] != before[k] and grown[k].stat().st_ino == inodes[k] for k in KINDS)
    added = {k: len(np.load(grown[k], mmap_mode="r")) - rows[k] for k in KINDS}
    assert added == {"nodes": len(new_keys), "triples": 2}  # the new document's; paris's stay
    # The table's files grew likewise, where the start read them (``kg.table_file``).
    assert all(vector_file(saved.folder, k).stat().st_ino == strings[k] for k in strings)
    change(reference)
    again = opened(saved.folder, embed_fn)
    assert_same_snapshot(again.snapshot, reference.snapshot)
    triples, nodes = again._tables.triples, again._tables.nodes
    assert len(triples) == rows["triples"] + 2 - 3 == len(triples.matrix) - 3  # paris's: dropped
    assert len(nodes) == len(nodes.matrix) - len(gone_keys) == len(again.snapshot.node_keys)
    for each in (again, reference):
        each.replace_documents({"more": supplied("more", ("Rhone", "flows into", "Sea"))})
    again.close()
    assert all(vector_file(saved.folder, k).stat().st_ino == inodes[k] for k in KINDS)
    assert_same_snapshot(opened(saved.folder, embed_fn).snapshot, reference.snapshot)


def test_rows_no_edge_reads_past_the_share_go_with_a_new_file(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the rows no item reads would pass ``_DEAD_SHARE`` of the file (here any),
    the save writes a new file of the rows the items read alone."""
    monkeypatch.setattr(kg.saved_vectors, "_DEAD_SHARE", 0.0)
    reference = closed_with_a_copy(saved, embed_fn)
    graph = opened(saved.folder, embed_fn)
    inodes = {kind: vector_file(saved.folder, kind).stat().st_ino for kind in KINDS}
    change(graph)
    graph.close()
    written = {kind: vector_file(saved.folder, kind) for kind in KINDS}
    assert all(written[k].stat().st_ino != inodes[k] for k in KINDS)
    change(reference)
    assert len(np.load(written["triples"])) == len(set(reference.snapshot.edge_text))
    assert len(np.load(written["nodes"])) == len(reference.snapshot.node_keys)
    assert_same_snapshot(opened(saved.folder, embed_fn).snapshot, reference.snapshot)


@pytest.mark.parametrize("fault", ["strings", "string-ends", "nodes", "triples", "snapshot"])
def test_a_save_that_fails_after_the_file_grew_leaves_no_snapshot(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    """Faults injected: the disk fills while the strings a change added are appended to
    the table's text (the first file grown) or to its ends (after the text grew), while
    the new rows are appended to the entities' file or the triples' (after the
    entities' grew), or when ``snapshot.npz`` is written after all grew. No snapshot and
    no vector file is left (a file grown but named by none would only be a stray); the
    next start builds from the rows the graph that was never closed."""
    reference = closed_with_a_copy(saved, embed_fn)
    graph = opened(saved.folder, embed_fn)
    change(graph)
    full = OSError(errno.ENOSPC, "No space left on device")
    if fault in KINDS:
        grow = kg.saved_vectors.grow_file

        def filling(matrix: np.ndarray, to: Path, write: Any) -> bool:
            def part(out: Any) -> None:
                out.write(b"\0" * 1000)
                raise full

            return grow(matrix, to, part if to.name.endswith(f"-{fault}.npy") else write)

        monkeypatch.setattr(kg.saved_vectors, "grow_file", filling)
    elif fault in TABLE_KINDS:
        grow_table = kg.table_file.grow

        def filling_table(path: Path, rows: int, to: Path, write: Any) -> bool:
            def part(out: Any) -> None:
                out.write(b"\0" * 10)
                raise full

            return grow_table(path, rows, to, part if to.name.endswith(f"-{fault}.npy") else write)

        monkeypatch.setattr(kg.table_file, "grow", filling_table)
    else:
        real = kg.snapshot_file.atomic_write

        def failing(path: Path, write: Any) -> None:
            if path.name == FILE:
                raise full
            real(path, write)

        monkeypatch.setattr(kg.snapshot_file, "atomic_write", failing)
    graph.close()  # logs the failure; the graph's file is whole
    monkeypatch.undo()
    assert not [p for p in saved.folder.iterdir() if "snapshot" in p.name]
    change(reference)
    again = opened(saved.folder, embed_fn)
    assert_same_snapshot(again.snapshot, reference.snapshot)
    again.close()
    assert_same_snapshot(opened(saved.folder, embed_fn).snapshot, reference.snapshot)


def test_a_table_adopts_a_file_whose_rows_not_all_have_keys(tmp_path: Path) -> None:
    """``EmbeddingTable.adopt`` with ``rows``: each key reads its own row, the others
    count as dropped rows of the base, new rows go after the file's; rows that are not
    ascending, out of range, or of a matrix in memory are refused."""
    values = np.random.default_rng(3).normal(size=(6, 4)).astype(np.float32)
    np.save(tmp_path / "rows.npy", values)
    matrix = FileMatrix.open(tmp_path / "rows.npy")
    table = EmbeddingTable.adopt(["a", "b", "c"], matrix, rows=np.array([0, 2, 5]))
    assert table.keys() == ["a", "b", "c"] and len(table.matrix) == 6
    np.testing.assert_array_equal(table.gather(["c", "a"]), values[[5, 0]])
    table.add(["d"], values[:1] * 2)
    assert table.rows_for(["d"]).tolist() == [6]
    for rows in ([2, 0, 5], [0, 2, 6], [0, 2]):
        with pytest.raises(ValueError):
            EmbeddingTable.adopt(["a", "b", "c"], matrix, rows=np.array(rows))
    with pytest.raises(ValueError):
        EmbeddingTable.adopt(["a", "b", "c"], values.copy(), rows=np.array([0, 2, 5]))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("count", [0, 1, 50, 2000])
def test_distinct_rows_are_what_np_unique_gives(dtype: type, count: int) -> None:
    rows: np.ndarray = np.random.default_rng(count).integers(0, 300, size=count).astype(dtype)
    used, place = distinct_rows(rows, 300)
    expected_used, expected_place = np.unique(rows, return_inverse=True)
    assert used.dtype == dtype
    np.testing.assert_array_equal(used, expected_used)
    np.testing.assert_array_equal(place, expected_place)
    np.testing.assert_array_equal(used[place], rows)
