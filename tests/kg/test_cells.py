"""Cells (``kg.cells``): a screen reads the rows of the cells nearest the question and is
exact over them; a row's cell depends on its vector and the centres alone, whichever part
of a table codes it; the graph keeps its rotation and cells between starts
(``kg.axes_file``), so that a restart links what the run before it linked."""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import kg.cells as cells
import kg.int8_rows as int8_rows
import kg.lead_rows as lead_rows
from durable import TEMP_SUFFIX
from kg import KnowledgeGraph, axes_file, snapshot_file
from kg.best_rows import Best
from kg.cells import Cells
from kg.code_parts import screen
from kg.embeddings import EmbeddingTable, normalize_rows
from kg.lead_rows import LeadRows, fit_rotation
from kg.rotation import LEAD, Rotation
from kg.row_matrix import dot_rows
from kg.vector_rows import VectorRows
from tests.kg.kg_testdata import (
    ROW_DIM,
    candidates_choice,
    full_scan_choice,
    near_queries,
    shaped_rows,
    supplied,
)


@pytest.fixture
def few_cells(monkeypatch: pytest.MonkeyPatch) -> int:
    """Tables turn from 512 rows and get 16 cells from 1,024, a question reading 4 of
    them (the service: 16,384; 512 from 100,000, reading 64)."""
    monkeypatch.setattr(lead_rows, "MIN_ROWS", 512)
    monkeypatch.setattr(cells, "MIN_ROWS", 1024)
    monkeypatch.setattr(cells, "COUNT", 16)
    monkeypatch.setattr(cells, "PROBE", 4)
    return 1024


def clustered_rows(rng: np.random.Generator, count: int, clusters: int = 24) -> np.ndarray:
    """Unit rows around ``clusters`` directions, as entities that name a few topics are."""
    centres = normalize_rows(rng.standard_normal((clusters, ROW_DIM)).astype(np.float32))
    picked = centres[rng.integers(clusters, size=count)]
    noise = rng.standard_normal((count, ROW_DIM)).astype(np.float32) / np.sqrt(ROW_DIM)
    return normalize_rows(picked + 0.5 * noise)


def read_rows(rotation: Rotation, filed: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The rows a screen of ``query`` reads: those filed under the cells near it."""
    return np.flatnonzero(np.isin(filed, rotation.cells_near(query)))


def filed_under(rotation: Rotation, rows: np.ndarray) -> np.ndarray:
    """Each row's cell, from its vector and the centres alone."""
    assert rotation.cells is not None
    return rotation.cells.assign(rotation.turn(rows)[:, :LEAD])


def assert_links_as_the_full_scan(
    table: EmbeddingTable, keys: list[str], rows: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """``table`` (of ``rows``, ``keys``) has its in-memory rows in cells, and questions
    near its rows link what the full scan links; the rows' cells."""
    codes = table.matrix.codes
    assert codes is not None and isinstance(codes[1], LeadRows) and codes[1].cell is not None
    vectors = VectorRows.of(table, keys)
    linked = 0
    for query in near_queries(rng, rows, 40):
        expected = full_scan_choice(rows, query, 0.5, 5)
        assert candidates_choice(vectors, query, 0.5, 5) == expected
        linked += len(expected)
    assert linked > 100  # the questions do link entities
    return codes[1].cell


def test_a_screen_is_exact_over_the_rows_of_the_cells_it_reads(few_cells: int) -> None:
    rng = np.random.default_rng(11)
    rows = shaped_rows(rng, 3000)
    rotation = fit_rotation(rows)
    assert rotation is not None and rotation.cells is not None
    assert rotation.cells.count == 16 and rotation.cells.fitted_rows == 3000
    coded = LeadRows.of(rows, rotation)
    assert coded.cell is not None
    np.testing.assert_array_equal(coded.cell, filed_under(rotation, rows))
    shares = []
    for query in near_queries(rng, rows, 30):
        read = read_rows(rotation, coded.cell, query)
        shares.append(len(read) / len(rows))
        exact = dot_rows(rows, query)
        for floor in (0.2, 0.5, 0.8):
            kept, estimates, slack = screen([coded], query, floor)
            assert np.all(np.diff(kept) > 0)
            assert set(kept.tolist()) <= set(read.tolist())
            assert set(read[exact[read] >= floor].tolist()) <= set(kept.tolist())
            assert np.all(np.abs(estimates - exact[kept]) <= slack)
    assert 0.05 < np.mean(shares) < 0.5  # 4 of 16 cells: about a quarter of the rows


def test_on_clustered_rows_the_cells_link_what_the_full_scan_links(few_cells: int) -> None:
    """A question near a topic finds its entities in the cells nearest it: a cell read
    from the wrong slice, or rows filed under the wrong centre, would miss them."""
    rng = np.random.default_rng(12)
    rows = clustered_rows(rng, 4000)
    keys = [f"e{i}" for i in range(len(rows))]
    table = EmbeddingTable.adopt(keys, rows.copy(), quantized=True)
    assert_links_as_the_full_scan(table, keys, rows, rng)


def test_a_row_is_filed_by_its_vector_whichever_part_codes_it(
    few_cells: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows a start adopts, rows added after, a gather for a save and a compaction file
    each row where coding it alone would: a question reads the same rows after a
    restart."""
    rng = np.random.default_rng(13)
    rows = clustered_rows(rng, 2600)
    base = rows[:2000].copy()
    base.flags.writeable = False
    table = EmbeddingTable.adopt([f"e{i}" for i in range(2000)], base, quantized=True)
    table.add([f"e{i}" for i in range(2000, 2600)], rows[2000:])
    rotation = table.rotation
    assert rotation is not None and rotation.cells is not None
    codes = table.matrix.codes
    assert codes is not None and all(isinstance(p, LeadRows) for p in codes)
    expected = filed_under(rotation, rows)
    filed = np.concatenate([p.cell for p in codes])  # type: ignore[union-attr]
    np.testing.assert_array_equal(filed, expected)
    order = np.array([2500, 7, 1999, 2000, 0], dtype=np.int64)
    gathered = table.matrix.codes_of(order)
    assert isinstance(gathered, LeadRows) and gathered.cell is not None
    np.testing.assert_array_equal(gathered.cell, expected[order])
    monkeypatch.setattr(EmbeddingTable, "_MIN_DEAD", 16)
    token = table.token
    table.discard([f"e{i}" for i in range(2000, 2580)])  # enough dropped to compact
    assert table.token is not token
    keys_left = table.keys()
    left = np.asarray(VectorRows.of(table, keys_left))
    compacted = table.matrix.codes
    assert compacted is not None and isinstance(compacted[1], LeadRows)
    assert isinstance(compacted[1].cell, np.ndarray)
    np.testing.assert_array_equal(compacted[1].cell, filed_under(rotation, rows[2580:]))
    vectors = VectorRows.of(table, keys_left)
    for query in near_queries(rng, left, 20):
        assert candidates_choice(vectors, query, 0.5, 5) == full_scan_choice(left, query, 0.5, 5)


def test_a_row_takes_the_same_cell_whatever_rows_are_assigned_with_it() -> None:
    """Near ties included: a start from the rows, a table grown live and codes made again
    assign a row in other blocks (``kg.cells._nearest``)."""
    rng = np.random.default_rng(17)
    centres = rng.standard_normal((512, LEAD)).astype(np.float32)
    pairs = rng.integers(0, len(centres), (3000, 2))
    between = (centres[pairs[:, 0]] + centres[pairs[:, 1]]) / 2  # two centres all but tie
    lead = (between + 1e-5 * rng.standard_normal(between.shape)).astype(np.float32)
    grid = Cells(centres, len(lead))
    whole = grid.assign(lead)
    for size in (1, 7, 100, 1000):
        parts = np.concatenate([grid.assign(lead[i : i + size]) for i in range(0, 3000, size)])
        np.testing.assert_array_equal(parts, whole, err_msg=f"blocks of {size}")
    exact = lead.astype(np.float64) @ centres.T.astype(np.float64)
    exact -= 0.5 * (centres.astype(np.float64) ** 2).sum(axis=1)
    np.testing.assert_array_equal(whole, np.argmax(exact, axis=1))


def test_a_table_grown_a_few_rows_at_a_time_is_coded_as_a_start_would_code_it(
    few_cells: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A table fed 40 rows at a time (a service started empty, then its documents) is
    coded again as its in-memory part grows: plain while small, turned past
    ``lead_rows.MIN_ROWS``, filed in cells past ``cells.MIN_ROWS``; each row where its
    vector files it, and the links those of the full scan."""
    rng = np.random.default_rng(18)
    rows = clustered_rows(rng, 4800)
    keys = [f"e{i}" for i in range(len(rows))]
    table = EmbeddingTable(quantized=True)
    kinds = {}
    with caplog.at_level(logging.INFO, logger="kg.embeddings"):
        for start in range(0, len(rows), 40):
            table.add(keys[start : start + 40], rows[start : start + 40])
            codes = table.matrix.codes
            assert codes is not None
            part = codes[1]
            kinds[start + 40] = (
                "plain"
                if not isinstance(part, LeadRows)
                else "cells"
                if part.cell is not None
                else "turned"
            )
    assert kinds[400] == "plain" and kinds[len(rows)] == "cells"
    assert "turned" in kinds.values()  # between the two thresholds
    assert "codes made again, turned, in 16 cells" in caplog.text
    rotation = table.rotation
    assert rotation is not None and rotation.cells is not None
    assert 1024 <= rotation.cells.fitted_rows < len(rows)
    cell = assert_links_as_the_full_scan(table, keys, rows, rng)
    np.testing.assert_array_equal(cell, filed_under(rotation, rows))


def ordered_part(rng: np.random.Generator) -> tuple[np.ndarray, Rotation, LeadRows]:
    """3,000 clustered rows, and a part with room for them whose first 2,000 are written
    and put in cell order (by a rotation fit to those)."""
    rows = clustered_rows(rng, 3000)
    rotation = fit_rotation(rows[:2000])
    assert rotation is not None and rotation.cells is not None
    part = LeadRows.zeros(len(rows), rotation)
    part.write(0, rows[:2000])
    part.prepare(2000)
    return rows, rotation, part


def test_views_share_the_cell_order_and_read_later_rows_in_place(
    few_cells: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change's view of a growing part reuses the order its last view had, reading the
    rows written after it in place (a screen is exact over them too), until they pass
    ``ORDER_TAIL_MIN``; then the order is made again over all, and shared on."""
    monkeypatch.setattr(lead_rows, "ORDER_TAIL_MIN", 150)
    monkeypatch.setattr(lead_rows, "ORDER_TAIL_SHARE", 0.0)
    rng = np.random.default_rng(19)
    rows, rotation, part = ordered_part(rng)
    order = part.head(2000)._cell_order()
    assert order is not None and len(order) == 2000
    part.write(2000, rows[2000:2100])  # after the order: read in place
    later = part.head(2100)
    assert later._cell_order() is order
    seen = rows[:2100]
    filed = filed_under(rotation, seen)
    tail_found = 0
    for query in [*near_queries(rng, rows[2000:2100], 20), *near_queries(rng, seen, 20)]:
        read = read_rows(rotation, filed, query)
        exact = dot_rows(seen, query)
        kept, estimates, slack = screen([later], query, 0.5)
        assert np.all(np.diff(kept) > 0)
        assert set(kept.tolist()) <= set(read.tolist())
        assert set(read[exact[read] >= 0.5].tolist()) <= set(kept.tolist())
        assert np.all(np.abs(estimates - exact[kept]) <= slack)
        tail_found += int(np.count_nonzero(kept >= 2000))
    assert tail_found > 20  # the rows after the order were found
    part.write(2100, rows[2100:])  # 1,000 after the order: made again over all
    part.prepare(len(rows))
    again = part.head(len(rows))._cell_order()
    assert again is not None and again is not order and len(again) == len(rows)
    assert later._cell_order() is order  # a view made before keeps its own
    assert part.head(2500)._cell_order() is not again  # it holds rows a shorter view lacks


def test_a_screen_codes_its_question_once_for_each_half(
    few_cells: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A screen over the cell order, the rows after it and the best rows reads the
    leading and the rest codes of three tables: it codes the turned question's two
    halves once each (``kg.int8_rows.CodedQuery``), not once for each table."""
    rng = np.random.default_rng(23)
    rows, _, part = ordered_part(rng)
    part.write(2000, rows[2000:2100])  # after the order: read in place, its own slack
    later = part.head(2100)
    coded_queries: list[int] = []
    code = int8_rows._code

    def counted(block: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
        if len(block) == 1:
            coded_queries.append(block.shape[1])
        return code(block)

    monkeypatch.setattr(int8_rows, "_code", counted)
    query = near_queries(rng, rows[:2100], 1)[0]
    kept, _, _ = screen([later], query, 0.3, Best(5, 0.0))
    assert kept.size  # the rest codes were read
    assert sorted(coded_queries) == sorted([LEAD, ROW_DIM - LEAD])


def test_cells_are_fit_where_the_rows_call_for_them(few_cells: int) -> None:
    rng = np.random.default_rng(14)
    assert not cells.due(None, 1023)
    assert cells.due(None, 1024)
    fitted = Cells(np.zeros((16, LEAD), np.float32), 1000)
    assert not cells.due(fitted, 3999)
    assert cells.due(fitted, 4000)  # grown fourfold: fit again
    small = fit_rotation(shaped_rows(rng, 800))
    assert small is not None and small.cells is None  # turned, read whole
    rows = shaped_rows(rng, 1200)
    kept = fit_rotation(rows, small)
    assert kept is not None and kept.basis is small.basis and kept.cells is not None
    again = fit_rotation(rows, kept)
    assert again is kept  # nothing due: coded as before
    grown = fit_rotation(shaped_rows(rng, 4800), kept)
    assert grown is not None and grown.basis is kept.basis and grown.cells is not kept.cells


def test_the_axes_are_kept_and_read_back(tmp_path: Path, few_cells: int) -> None:
    rng = np.random.default_rng(15)
    rotation = fit_rotation(shaped_rows(rng, 1500))
    assert rotation is not None and rotation.cells is not None
    axes_file.write(tmp_path, rotation)
    back = axes_file.read(tmp_path)
    assert back is not None and back.cells is not None
    np.testing.assert_array_equal(back.basis, rotation.basis)
    np.testing.assert_array_equal(back.cells.centres, rotation.cells.centres)
    assert back.cells.fitted_rows == 1500
    plain = Rotation(rotation.basis)
    axes_file.write(tmp_path, plain)
    back = axes_file.read(tmp_path)
    assert back is not None and back.cells is None


def test_axes_that_cannot_be_read_are_fit_again_and_a_failed_write_is_logged(
    tmp_path: Path, few_cells: int, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(16)
    rotation = fit_rotation(shaped_rows(rng, 1500))
    assert rotation is not None
    path = tmp_path / axes_file.FILE
    path.write_bytes(b"not an npz")
    leftover = tmp_path / f".{axes_file.FILE}.x1{TEMP_SUFFIX}"
    leftover.write_bytes(b"a write a crash cut short")
    with caplog.at_level(logging.WARNING, logger="kg.axes_file"):
        assert axes_file.read(tmp_path) is None
    assert "fitting the entity codes' axes again" in caplog.text
    assert not leftover.exists()
    skewed = Rotation(rotation.basis * np.float32(1.01), rotation.cells)  # not orthonormal
    axes_file.write(tmp_path, skewed)
    assert axes_file.read(tmp_path) is None
    path.unlink()
    path.mkdir()  # the file's name taken by a folder: the write fails
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kg.axes_file"):
        axes_file.write(tmp_path, rotation)
    assert "were not kept" in caplog.text


class ShapedEmbed:
    """Deterministic clustered vectors per text (the same text, the same vector)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(17)
        self._centres = normalize_rows(rng.standard_normal((24, ROW_DIM)).astype(np.float32))

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for text in texts:
            rng = np.random.default_rng(zlib.crc32(text.encode()))
            noise = rng.standard_normal(ROW_DIM).astype(np.float32) / np.sqrt(ROW_DIM)
            out.append(self._centres[len(text) % len(self._centres)] + 0.5 * noise)
        return normalize_rows(np.asarray(out))


@pytest.mark.parametrize("documents", [1, 35])
def test_a_restart_links_by_the_cells_the_graph_kept(
    tmp_path: Path, few_cells: int, caplog: pytest.LogCaptureFixture, documents: int
) -> None:
    """The first run fits the rotation and cells and keeps them (logged): from its one
    change, or as its entities grow over 35 changes of 20 triples; a start after a clean
    stop and one after a crash code by them, and link what the first run linked."""
    embed = ShapedEmbed()
    folder = tmp_path / "kg"
    graph = KnowledgeGraph(folder, embed)
    triples = [(f"thing {i} of kind {i % 7}", "relates to", f"part {i}") for i in range(700)]
    share = len(triples) // documents
    with caplog.at_level(logging.INFO, logger="kg.axes_file"):
        for d in range(documents):
            doc = f"doc{d}"
            part = triples[d * share : (d + 1) * share]
            graph.replace_documents({doc: supplied(doc, *part)}, {doc: "v1"})
    fits = [int(n) for n in re.findall(r"16 cells fit to (\d+) entities", caplog.text)]
    assert fits and fits[-1] >= (1400 if documents == 1 else 1024)
    kept = axes_file.read(folder)
    assert kept is not None and kept.cells is not None
    assert graph.snapshot.node_vectors.matrix.rotation is not None
    queries = list(embed([f"thing {i} of kind {i % 7}" for i in range(0, 700, 35)]))

    def links(g: KnowledgeGraph) -> list[list[str]]:
        snap = g.snapshot
        found = []
        for query in queries:
            items, sims = snap.node_vectors.candidates(query, 0.5, 5)
            found.append(sorted(snap.node_keys[int(i)] for i in items[sims >= 0.5]))
        return found

    first = links(graph)
    assert sum(map(len, first)) >= len(queries)
    graph.close()
    for crash in (False, True):
        if crash:
            snapshot_file.discard(folder)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="kg.axes_file"):
            again = KnowledgeGraph(folder, embed)
        assert "new axes" not in caplog.text
        rotation = again.snapshot.node_vectors.matrix.rotation
        assert rotation is not None and rotation.cells is not None
        np.testing.assert_array_equal(rotation.basis, kept.basis)
        np.testing.assert_array_equal(rotation.cells.centres, kept.cells.centres)
        assert links(again) == first
        again.close()
