"""The entities' turned codes saved with the snapshot (``kg.saved_codes``): a start after
a clean stop reads them back instead of coding every entity, and they are the codes a
start would have made; codes made by other axes are made again; damaged ones make the
start build from the rows."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import kg.int8_rows as int8_rows
import kg.npz_file as npz_file
from kg import KnowledgeGraph, axes_file, snapshot_file
from kg.code_parts import gather
from kg.lead_rows import LeadRows
from kg.rotation import Rotation
from tests.kg.kg_testdata import supplied
from tests.kg.test_cells import ShapedEmbed, few_cells  # noqa: F401  (the fixture)


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
    codes = graph.snapshot.node_vectors.matrix.codes
    assert codes is not None and isinstance(codes[1], LeadRows) and codes[1].cell is not None
    return codes[1]


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
def test_codes_saved_after_a_change_are_gathered_in_node_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change after a start puts new entities' codes in a part of their own: the stop
    saves every entity's in node order, and the next start reads those back."""
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
    assert_same_codes(read, LeadRows.of(later.snapshot.node_vectors.matrix.tail, read.rotation))


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
    assert_same_codes(read, LeadRows.of(again.snapshot.node_vectors.matrix.tail, read.rotation))


@pytest.mark.usefixtures("few_cells")
def test_codes_that_do_not_fit_the_snapshot_are_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = stopped_graph(tmp_path / "kg")
    path = first.folder / snapshot_file.FILE
    with np.load(path) as held:
        arrays = {name: held[name] for name in held.files}
    arrays["entity_codes_lead"] = arrays["entity_codes_lead"][:-1]
    with path.open("wb") as out:
        np.savez(out, **arrays)
    with caplog.at_level(logging.WARNING, logger="kg.snapshot_file"):
        again = KnowledgeGraph(first.folder, ShapedEmbed())
    assert "entity codes of [1399, 1400] rows for 1400 entities" in caplog.text
    assert links(again) == links(first)


@pytest.mark.usefixtures("few_cells")
def test_gathered_codes_are_written_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codes saved in the entities' file's row order from rows of two parts (after a
    change: the file the start mapped, grown) are written as ``np.save`` writes them
    gathered whole, without being gathered whole: no block of more than ``BLOCK_ROWS``
    rows is made. Each file row's codes are those of the matrix row it holds."""
    monkeypatch.setattr(npz_file, "BLOCK_ROWS", 100)
    first = stopped_graph(tmp_path / "kg")
    again = KnowledgeGraph(first.folder, ShapedEmbed())
    more = [(f"another {i}", "relates to", f"thing {i} of kind {i % 7}") for i in range(40)]
    again.replace_documents({"more": supplied("more", *more)}, {"more": "v1"})
    nodes = again.snapshot.node_vectors
    assert nodes.matrix.codes is not None
    blocks: list[int] = []
    fill = int8_rows.fill_rows

    def counted(parts: list[np.ndarray], rows: np.ndarray, out: np.ndarray) -> None:
        blocks.append(len(rows))
        fill(parts, rows, out)

    monkeypatch.setattr(npz_file, "fill_rows", counted)
    again.close()
    assert blocks and max(blocks) <= 100 and sum(blocks) == 6 * 1440  # six arrays of rows
    with np.load(first.folder / snapshot_file.FILE) as held:
        node_rows = held["node_rows"]
    held_rows = np.empty(len(node_rows), np.int64)  # the matrix row each file row holds
    held_rows[node_rows] = nodes.rows
    whole = gather(nodes.matrix.codes, held_rows)
    assert isinstance(whole, LeadRows) and whole.cell is not None
    expected = {
        "lead": whole.lead.codes,
        "lead_unit": whole.lead.unit,
        "rest": whole.rest.codes,
        "rest_unit": whole.rest.unit,
        "rest_norm": whole.rest_norm,
        "cell": whole.cell,
    }
    with np.load(first.folder / snapshot_file.FILE) as held:
        for name, array in expected.items():
            written = held[f"entity_codes_{name}"]
            assert written.dtype == array.dtype
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
    assert_same_codes(read, LeadRows.of(later.snapshot.node_vectors.matrix.tail, read.rotation))
    assert links(later) == links(first)
