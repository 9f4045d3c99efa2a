"""The rows a table writes while it runs go to a file of no name past a size
(``kg.tail_rows``): read back as they were written, views taken before a spill unchanged,
nothing left in the folder, and the rows kept in memory where the disk refuses them. A
graph fed its documents live so keeps few vectors in memory, and links, saves and
restarts as one that kept them all."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import numpy as np
import pytest

import kg.file_matrix
import kg.tail_rows as tail_rows
from kg import KnowledgeGraph, snapshot_file
from kg.embeddings import EmbeddingTable, normalize_rows
from kg.file_matrix import SpilledMatrix
from kg.tail_rows import TailRows
from kg.vector_rows import VectorRows
from tests.kg.kg_testdata import (
    ROW_DIM,
    candidates_choice,
    full_scan_choice,
    near_queries,
    supplied,
)
from tests.kg.test_cells import ShapedEmbed, clustered_rows, few_cells

__all__ = ["few_cells"]  # a fixture, used by name

DIM = 8
ROW_BYTES = 4 * DIM


def rows_of(start: int, count: int) -> np.ndarray:
    """Rows whose values name them: row i is all i."""
    return np.repeat(np.arange(start, start + count, dtype=np.float32)[:, None], DIM, axis=1)


def test_rows_past_the_size_go_to_a_file_and_read_back_as_written(tmp_path: Path) -> None:
    tail = TailRows(DIM, tmp_path, spill_bytes=100 * ROW_BYTES)
    views = []
    for start in range(0, 1000, 7):
        tail.append(rows_of(start, 7))
        views.append((start + 7, tail.rows()))
        assert tail.in_memory < 100  # spilled at 100
    assert len(tail) == 1001 and isinstance(tail.rows(), SpilledMatrix)
    assert tail.capacity <= 101 + 7
    # Every view, older ones too, reads the rows it was taken with.
    for count, view in views:
        assert len(view) == count
        np.testing.assert_array_equal(np.asarray(view[np.arange(count)]), rows_of(0, count))
    view = tail.rows()
    assert isinstance(view, SpilledMatrix)
    picked = np.array([[1000, 3], [99, 100]])
    np.testing.assert_array_equal(view[picked][..., 0], picked)
    np.testing.assert_array_equal(np.concatenate(list(view.blocks(64))), rows_of(0, 1001))
    np.testing.assert_array_equal(view[5:9], rows_of(5, 4))
    with pytest.raises(IndexError):
        view[np.array([1001])]
    assert list(tmp_path.iterdir()) == []  # the file has no name: a crash leaves nothing


def test_without_a_folder_every_row_stays_in_memory(tmp_path: Path) -> None:
    tail = TailRows(DIM, None, spill_bytes=10 * ROW_BYTES)
    tail.append(rows_of(0, 50))
    assert tail.in_memory == 50 and isinstance(tail.rows(), np.ndarray)
    tail.spill_to(tmp_path)
    tail.append(rows_of(50, 1))
    assert tail.in_memory == 0 and isinstance(tail.rows(), SpilledMatrix)
    np.testing.assert_array_equal(np.asarray(tail.rows()[np.arange(51)]), rows_of(0, 51))


def test_rows_the_disk_refuses_stay_in_memory_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The failure is injected: the file's writes fail with ENOSPC after the first."""
    writes = []
    real_pwrite = os.pwrite

    def full(fd: int, data: bytes, at: int) -> int:
        writes.append(at)
        if len(writes) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, at)

    monkeypatch.setattr(kg.file_matrix.os, "pwrite", full)
    tail = TailRows(DIM, tmp_path, spill_bytes=10 * ROW_BYTES)
    with caplog.at_level(logging.WARNING, logger="kg.tail_rows"):
        tail.append(rows_of(0, 10))  # spilled
        tail.append(rows_of(10, 10))  # refused: stays
        tail.append(rows_of(20, 30))  # no more tries
    assert len(writes) == 2
    assert "new vectors stay in memory" in caplog.text and "No space" in caplog.text
    assert tail.in_memory == 40 and len(tail) == 50
    np.testing.assert_array_equal(np.asarray(tail.rows()[np.arange(50)]), rows_of(0, 50))


def test_a_compaction_keeps_the_rows_asked_for(tmp_path: Path) -> None:
    tail = TailRows(DIM, tmp_path, spill_bytes=16 * ROW_BYTES)
    tail.append(rows_of(0, 100))
    keep = np.arange(1, 100, 3)
    kept = tail.compacted(keep)
    assert len(kept) == len(keep) and kept.in_memory < 16
    np.testing.assert_array_equal(kept.rows()[np.arange(len(keep))], rows_of(0, 100)[keep])


def test_a_table_grown_live_spills_and_links_as_one_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, few_cells: int
) -> None:
    """Two tables fed the same rows 40 at a time, one spilling past 200 rows: the same
    codes, links, gathers and compaction; the spilled one keeps under 240 rows' vectors
    in memory."""
    rng = np.random.default_rng(26)
    rows = clustered_rows(rng, 3000)
    keys = [f"e{i}" for i in range(len(rows))]
    spilled, kept = EmbeddingTable(quantized=True), EmbeddingTable(quantized=True)
    spilled.spill_to(tmp_path)
    monkeypatch.setattr(tail_rows, "SPILL_BYTES", 200 * 4 * ROW_DIM)
    for start in range(0, len(rows), 40):
        for table in (spilled, kept):
            table.add(keys[start : start + 40], rows[start : start + 40])
    assert isinstance(spilled.matrix.tail, SpilledMatrix) and spilled._tail.in_memory < 240
    assert isinstance(kept.matrix.tail, np.ndarray)
    assert spilled.rotation is not None and spilled.rotation.cells is not None
    for query in near_queries(rng, rows, 30):
        expected = full_scan_choice(rows, query, 0.5, 5)
        assert candidates_choice(VectorRows.of(spilled, keys), query, 0.5, 5) == expected
        assert candidates_choice(VectorRows.of(kept, keys), query, 0.5, 5) == expected
    np.testing.assert_array_equal(spilled.gather(keys[::-7]), rows[::-7])
    np.testing.assert_array_equal(spilled.matrix.dot(rows[0]), kept.matrix.dot(rows[0]))
    spilled.discard(keys[:2000])  # compacted
    np.testing.assert_array_equal(spilled.gather(keys[2000:]), rows[2000:])
    assert list(tmp_path.iterdir()) == []


def test_a_graph_fed_live_keeps_few_vectors_in_memory_and_restarts_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, few_cells: int
) -> None:
    """A graph fed 35 documents, its tables spilling past 256 rows: the vectors in
    memory stay under that, and a start after a clean stop and one after a crash read
    back the same vectors and link the same entities."""
    monkeypatch.setattr(tail_rows, "SPILL_BYTES", 256 * 4 * ROW_DIM)
    embed = ShapedEmbed()
    folder = tmp_path / "kg"
    graph = KnowledgeGraph(folder, embed)
    triples = [(f"thing {i} of kind {i % 7}", "relates to", f"part {i}") for i in range(700)]
    for d in range(35):
        doc = f"doc{d}"
        graph.replace_documents({doc: supplied(doc, *triples[d * 20 : (d + 1) * 20])}, {doc: "v1"})
    nodes, edges = graph._tables.nodes, graph._tables.triples
    assert len(nodes) >= 1400 and len(edges) == 700
    assert nodes._tail.in_memory < 256 and edges._tail.in_memory < 256
    assert isinstance(graph.snapshot.node_vectors.matrix.tail, SpilledMatrix)
    queries = normalize_rows(np.asarray(embed([t[0] for t in triples[::35]])))
    keys = sorted(graph.snapshot.node_keys)

    def state(g: KnowledgeGraph) -> tuple[list[list[str]], np.ndarray]:
        snap = g.snapshot
        found = []
        for query in queries:
            items, sims = snap.node_vectors.candidates(query, 0.5, 5)
            found.append(sorted(snap.node_keys[int(i)] for i in items[sims >= 0.5]))
        return found, g._tables.nodes.gather(keys)

    first_links, first_vectors = state(graph)
    assert sum(map(len, first_links)) >= len(queries)
    graph.close()
    for crash in (False, True):
        if crash:
            snapshot_file.discard(folder)
        again = KnowledgeGraph(folder, embed)
        links, vectors = state(again)
        assert links == first_links
        np.testing.assert_array_equal(vectors, first_vectors)
        again.close()
