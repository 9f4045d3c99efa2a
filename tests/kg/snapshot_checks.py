"""What the snapshot tests count and check (``kg.snapshot_file``): the reads of the rows,
the saves, the codings, and a start that must build from the rows."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.snapshot_file
from kg import EmbedFn, KnowledgeGraph
from kg.graph_file import GraphFile, GraphRows
from kg.int8_rows import Int8Rows
from tests.kg.test_kg_load import assert_same_snapshot


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


#: The files beside ``snapshot.npz`` of a graph too small for codes: its vectors, and its
#: table of strings (``kg.table_file``).
SNAPSHOT_FILES = ("nodes.npy", "triples.npy", "strings.npy", "string-ends.npy")


#: The saved entity codes' arrays of a row each (``kg.saved_codes``).
CODE_ROWS = ("lead", "lead_unit", "rest", "rest_unit", "rest_norm", "cell")
