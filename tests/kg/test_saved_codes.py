"""The entities' turned codes saved with the snapshot (``kg.saved_codes``): a start after
a clean stop reads them back instead of coding every entity, and they are the codes a
start would have made; codes made by other axes are made again; damaged ones make the
start build from the rows."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest

import kg.int8_rows as int8_rows
import kg.npz_file as npz_file
from kg import KnowledgeGraph, axes_file, saved_codes, saved_vectors, snapshot_file
from kg.code_parts import gather
from kg.lead_rows import LeadRows
from kg.rotation import Rotation
from kg.vector_rows import VectorRows
from tests.kg.kg_testdata import supplied
from tests.kg.test_cells import ShapedEmbed, few_cells  # noqa: F401  (the fixture)
from tests.kg.test_kg_load import assert_same_snapshot
from tests.kg.test_snapshot_formats import as_format_5, write_snapshot


def codes_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each table coded turned from here on (``LeadRows.of``)."""
    made: list[int] = []
    code = LeadRows.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type[LeadRows], matrix: np.ndarray, rotation: Rotation) -> LeadRows:
        made.append(len(matrix))
        return code(cls, matrix, rotation)

    monkeypatch.setattr(LeadRows, "of", classmethod(counting))
    return made


def stopped_graph(folder: Path) -> KnowledgeGraph:
    """A graph of 1,400 entities (turned codes in 16 cells, ``few_cells``), closed."""
    graph = KnowledgeGraph(folder, ShapedEmbed())
    triples = [(f"thing {i} of kind {i % 7}", "relates to", f"part {i}") for i in range(700)]
    graph.replace_documents({"doc": supplied("doc", *triples)}, {"doc": "v1"})
    graph.close()
    return graph


def turned_codes(graph: KnowledgeGraph) -> LeadRows:
    """The entities' codes the snapshot read back: its own rows' (``codes[1]``) until
    the graph is prepared for changes, then the embedding table's, whose base they are."""
    codes = graph.snapshot.node_vectors.matrix.codes
    assert codes is not None
    turned = [c for c in codes if isinstance(c, LeadRows) and len(c)]
    assert len(turned) == 1 and turned[0].cell is not None
    return turned[0]


def all_rows(graph: KnowledgeGraph) -> np.ndarray:
    """Every row of the entities' matrix, however the snapshot holds it."""
    matrix = graph.snapshot.node_vectors.matrix
    return matrix[np.arange(len(matrix))]


def assert_same_codes(found: LeadRows, expected: LeadRows) -> None:
    for name in ("lead", "rest"):
        a, b = getattr(found, name), getattr(expected, name)
        np.testing.assert_array_equal(a.codes, b.codes)
        np.testing.assert_array_equal(a.unit, b.unit)
        assert (a.max_error, a.max_norm) == (b.max_error, b.max_norm)
    np.testing.assert_array_equal(found.rest_norm, expected.rest_norm)
    np.testing.assert_array_equal(found.cell, expected.cell)


def links(graph: KnowledgeGraph) -> list[list[str]]:
    snap = graph.snapshot
    found = []
    for query in ShapedEmbed()([f"thing {i} of kind {i % 7}" for i in range(0, 700, 35)]):
        items, sims = snap.node_vectors.candidates(query, 0.5, 5)
        found.append(sorted(snap.node_keys[int(i)] for i in items[sims >= 0.5]))
    return found


@pytest.mark.usefixtures("few_cells")
def test_a_start_after_a_clean_stop_reads_the_codes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No entity is coded, and the codes read back are the bytes coding would make."""
    first = stopped_graph(tmp_path / "kg")
    made = codes_made(monkeypatch)
    again = KnowledgeGraph(first.folder, ShapedEmbed())
    assert made == []
    read = turned_codes(again)
    nodes = again.snapshot.node_vectors.matrix
    assert_same_codes(read, LeadRows.of(nodes.tail, read.rotation))
    assert links(again) == links(first) and sum(map(len, links(again))) >= 20
    again.close()
    again = KnowledgeGraph(first.folder, ShapedEmbed())  # saved again at that close
    assert made == [1400] and links(again) == links(first)


@pytest.mark.usefixtures("few_cells")
def test_codes_saved_after_a_change_are_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change after a start puts new entities' codes in a part of their own: the stop
    saves every entity's, and the next start reads those back."""
    first = stopped_graph(tmp_path / "kg")
    again = KnowledgeGraph(first.folder, ShapedEmbed())
    more = [
        (f"another {i} of kind {i % 5}", "relates to", f"thing {i} of kind {i % 7}")
        for i in range(40)
    ]
    again.replace_documents({"more": supplied("more", *more)}, {"more": "v1"})
    parts = again.snapshot.node_vectors.matrix.codes
    assert parts is not None and all(len(part) for part in parts)  # two parts hold rows
    again.close()
    made = codes_made(monkeypatch)
    later = KnowledgeGraph(first.folder, ShapedEmbed())
    assert made == [] and len(later.snapshot.node_keys) == 1440
    read = turned_codes(later)
    assert_same_codes(read, LeadRows.of(all_rows(later), read.rotation))


@pytest.mark.usefixtures("few_cells")
def test_codes_made_by_other_axes_are_made_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = stopped_graph(tmp_path / "kg")
    kept = axes_file.read(first.folder)
    assert kept is not None and kept.cells is not None
    swapped = kept.basis.copy()
    swapped[[0, 1]] = swapped[[1, 0]]  # still orthonormal: other leading values, other cells
    axes_file.write(first.folder, Rotation(swapped, kept.cells))
    made = codes_made(monkeypatch)
    with caplog.at_level(logging.INFO, logger="kg.saved_codes"):
        again = KnowledgeGraph(first.folder, ShapedEmbed())
    assert "coding the entities again" in caplog.text and made == [1400]
    read = turned_codes(again)
    np.testing.assert_array_equal(read.rotation.basis, swapped)
    assert_same_codes(read, LeadRows.of(all_rows(again), read.rotation))


def code_files(folder: Path) -> dict[str, Path]:
    """The folder's entity code files by array name."""
    pattern = snapshot_file.VECTOR_FILE.format(id="*", kind="codes-*")
    return {p.stem.rsplit("codes-", 1)[1]: p for p in folder.glob(pattern)}


@pytest.mark.usefixtures("few_cells")
@pytest.mark.parametrize("damage", ["short", "missing"])
def test_codes_that_do_not_fit_the_snapshot_are_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A code file a row short, or gone: the snapshot is ignored (with a warning) and
    the start builds from the rows the graph that was saved."""
    first = stopped_graph(tmp_path / "kg")
    lead = code_files(first.folder)["lead"]
    if damage == "short":
        np.save(lead, np.load(lead)[:-1])
    else:
        lead.unlink()
    with caplog.at_level(logging.WARNING, logger="kg.snapshot_file"):
        again = KnowledgeGraph(first.folder, ShapedEmbed())
    expected = "entity codes of [1399, 1400] rows" if damage == "short" else "No such file"
    assert "ignoring the saved snapshot" in caplog.text and expected in caplog.text
    assert links(again) == links(first)


def changed_after_a_start(first: KnowledgeGraph) -> KnowledgeGraph:
    """A start on ``first``'s folder, and a change that adds 40 entities to it."""
    again = KnowledgeGraph(first.folder, ShapedEmbed())
    more = [(f"another {i}", "relates to", f"thing {i} of kind {i % 7}") for i in range(40)]
    again.replace_documents({"more": supplied("more", *more)}, {"more": "v1"})
    return again


def counted_blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each block of codes gathered for a file from here on."""
    blocks: list[int] = []
    fill = int8_rows.fill_rows

    def counted(parts: list[np.ndarray], rows: np.ndarray, out: np.ndarray) -> None:
        blocks.append(len(rows))
        fill(parts, rows, out)

    monkeypatch.setattr(npz_file, "fill_rows", counted)
    return blocks


def held_codes(folder: Path, nodes: VectorRows) -> LeadRows:
    """The codes of the matrix rows the saved entities' file holds, in its order."""
    with np.load(folder / snapshot_file.FILE) as held:
        node_rows = held["node_rows"]
    held_rows = np.empty(len(node_rows), np.int64)
    held_rows[node_rows] = nodes.rows
    assert nodes.matrix.codes is not None
    whole = gather(nodes.matrix.codes, held_rows)
    assert isinstance(whole, LeadRows) and whole.cell is not None
    return whole


@pytest.mark.usefixtures("few_cells")
def test_a_stop_after_a_change_grows_the_code_files_by_the_new_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The codes a start read back are not written again: each code file is the one
    the start read, renamed for the new snapshot, with the 40 new entities' codes after
    its rows; the next start reads every row's codes back, and codes none."""
    first = stopped_graph(tmp_path / "kg")
    inodes = {name: path.stat().st_ino for name, path in code_files(first.folder).items()}
    assert set(inodes) == set(saved_codes.FIELDS)
    again = changed_after_a_start(first)
    blocks = counted_blocks(monkeypatch)
    again.close()
    assert blocks == [40] * 6  # the new rows' alone, one block for each file
    grown = code_files(first.folder)
    assert {name: path.stat().st_ino for name, path in grown.items()} == inodes
    expected = held_codes(first.folder, again.snapshot.node_vectors)
    made = codes_made(monkeypatch)
    later = KnowledgeGraph(first.folder, ShapedEmbed())
    assert made == [] and len(later.snapshot.node_keys) == 1440
    assert_same_codes(turned_codes(later), expected)
    assert_same_codes(expected, LeadRows.of(all_rows(later), expected.rotation))
    assert links(later) == links(again)


@pytest.mark.usefixtures("few_cells")
def test_gathered_codes_are_written_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the entities' file is written anew (here: forced), codes from rows of two
    parts are written as ``np.save`` writes them gathered whole, without being gathered
    whole: no block of more than ``BLOCK_ROWS`` rows is made. Each file row's codes are
    those of the matrix row it holds."""
    monkeypatch.setattr(npz_file, "BLOCK_ROWS", 100)
    monkeypatch.setattr(saved_vectors, "_DEAD_SHARE", -1.0)  # never grown
    first = stopped_graph(tmp_path / "kg")
    inodes = {path.stat().st_ino for path in code_files(first.folder).values()}
    again = changed_after_a_start(first)
    blocks = counted_blocks(monkeypatch)
    again.close()
    assert blocks and max(blocks) <= 100 and sum(blocks) == 6 * 1440  # six arrays of rows
    files = code_files(first.folder)
    assert not inodes & {path.stat().st_ino for path in files.values()}
    whole = held_codes(first.folder, again.snapshot.node_vectors)
    expected: dict[str, np.ndarray | None] = {
        "lead": whole.lead.codes,
        "lead_unit": whole.lead.unit,
        "rest": whole.rest.codes,
        "rest_unit": whole.rest.unit,
        "rest_norm": whole.rest_norm,
        "cell": whole.cell,
    }
    for name, array in expected.items():
        written = np.load(files[name])
        assert array is not None and written.dtype == array.dtype
        np.testing.assert_array_equal(written, array)


@pytest.mark.usefixtures("few_cells")
def test_a_stop_after_a_start_from_the_rows_saves_codes_the_next_start_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a crash (no snapshot) the start codes the entities in the rows' order, not
    the nodes': its stop gathers them as it writes, and the next start codes none."""
    first = stopped_graph(tmp_path / "kg")
    (first.folder / snapshot_file.FILE).unlink()
    crashed = KnowledgeGraph(first.folder, ShapedEmbed())
    nodes = crashed.snapshot.node_vectors
    assert not np.array_equal(nodes.rows, np.sort(nodes.rows))  # gathered at the save
    crashed.close()
    made = codes_made(monkeypatch)
    later = KnowledgeGraph(first.folder, ShapedEmbed())
    assert made == []
    read = turned_codes(later)
    assert_same_codes(read, LeadRows.of(all_rows(later), read.rotation))
    assert links(later) == links(first)


@pytest.mark.usefixtures("few_cells")
def test_a_disk_that_fills_while_a_code_file_grows_leaves_no_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injected: the disk fills while the new rows' codes are appended to the
    third code file (after the vector files and two code files grew). No snapshot and
    no vector or code file is left; the next start builds from the rows the graph that
    was never closed."""
    first = stopped_graph(tmp_path / "kg")
    again = changed_after_a_start(first)
    grow, calls = saved_codes.grow, []

    def filling(path: Path, rows: int, to: Path, write: Any) -> bool:
        calls.append(to)
        if len(calls) < 3:
            return grow(path, rows, to, write)

        def part(out: IO[bytes]) -> None:
            out.write(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")

        return grow(path, rows, to, part)

    monkeypatch.setattr(saved_codes, "grow", filling)
    again.close()  # logs the failure; the graph's file is whole
    monkeypatch.undo()
    assert len(calls) == 3
    assert not [p for p in first.folder.iterdir() if p.name.startswith("snapshot")]
    later = KnowledgeGraph(first.folder, ShapedEmbed())
    assert_same_snapshot(later.snapshot, again.snapshot)


@pytest.mark.usefixtures("few_cells")
def test_codes_kept_in_a_format_5_snapshot_are_read_and_saved_in_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot of format 5 kept the codes in ``snapshot.npz``, in node order: the
    start reads them from there and codes nothing; its stop saves them in files, which
    the next start reads."""
    first = stopped_graph(tmp_path / "kg")
    write_snapshot(first.folder, *as_format_5(first.folder))
    assert not code_files(first.folder)
    made = codes_made(monkeypatch)
    again = KnowledgeGraph(first.folder, ShapedEmbed())
    assert made == [] and links(again) == links(first)
    read = turned_codes(again)
    assert_same_codes(read, LeadRows.of(all_rows(again), read.rotation))
    made.clear()  # that coding, the comparison's
    again.close()
    assert set(code_files(first.folder)) == set(saved_codes.FIELDS)
    later = KnowledgeGraph(first.folder, ShapedEmbed())
    assert made == [] and links(later) == links(first)
