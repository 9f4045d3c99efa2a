"""The graph's embedding tables (``kg.graph_tables``) on their own: what is embedded, and
when vectors a start read into memory are moved to files. The graph's own tests
(``test_row_files.py``, ``test_tail_rows.py``) run the same through ``KnowledgeGraph``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kg.row_files
from kg.file_matrix import FileMatrix
from kg.graph_file import Vectors
from kg.graph_tables import GraphTables

DIM = 16


class HashEmbed:
    """Unit vectors drawn from each text's hash; records each call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).normal(size=DIM) for t in texts]
        matrix = np.asarray(rows, dtype=np.float32).reshape(len(texts), DIM)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def read_vectors(embed: HashEmbed, keys: list[str]) -> Vectors:
    """Vectors as a start after a crash reads them into memory (a writeable matrix)."""
    return Vectors(keys, np.array(embed(keys)))


def test_only_what_has_no_vector_is_embedded_in_one_call(tmp_path: Path) -> None:
    tables, embed = GraphTables(tmp_path, files=False), HashEmbed()
    added = tables.embed_missing(embed, [("paris", "Paris"), ("paris", "PARIS")], ["a b c"])
    assert added == (["paris"], ["a b c"])
    assert embed.calls == [["Paris", "a b c"]]  # one call; the first name given wins
    added = tables.embed_missing(embed, [("paris", "Paris"), ("lyon", "Lyon")], ["a b c"])
    assert added == (["lyon"], [])
    assert embed.calls[1:] == [["Lyon"]]
    assert tables.embed_missing(embed, [("lyon", "Lyon")], ["a b c"]) == ([], [])
    assert len(embed.calls) == 2
    np.testing.assert_allclose(tables.nodes.gather(["lyon"]), HashEmbed()(["Lyon"]), atol=1e-6)


def test_vectors_read_into_memory_move_to_files_only_where_the_graph_writes_them(
    tmp_path: Path,
) -> None:
    embed = HashEmbed()
    nodes, triples = read_vectors(embed, ["paris", "lyon"]), read_vectors(embed, ["p near l"])
    kept = GraphTables(tmp_path, files=False)
    kept.adopt(nodes, triples)
    assert not kept.in_memory  # a graph that writes no files keeps them where they are
    assert not isinstance(kept.nodes.matrix.base, FileMatrix)
    tables = GraphTables(tmp_path, files=True)
    tables.adopt(nodes, triples)
    assert tables.in_memory
    assert tables.map_to_files()
    assert not tables.in_memory
    for table in (tables.nodes, tables.triples):  # mapped from their files
        assert isinstance(table.matrix.base, FileMatrix) and table.matrix.base.reads_file
    np.testing.assert_array_equal(tables.nodes.gather(["lyon", "paris"]), nodes.matrix[::-1])
    np.testing.assert_array_equal(tables.triples.gather(["p near l"]), triples.matrix)


def test_a_disk_that_refuses_the_files_leaves_the_vectors_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the vector file's write fails with ENOSPC."""

    def full(path: Path, write: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kg.row_files, "atomic_write", full)
    embed = HashEmbed()
    nodes = read_vectors(embed, ["paris"])
    tables = GraphTables(tmp_path, files=True)
    tables.adopt(nodes, read_vectors(embed, ["p near l"]))
    assert not tables.map_to_files()
    assert tables.in_memory  # tried again by the next start, not by each change
    np.testing.assert_array_equal(tables.nodes.gather(["paris"]), nodes.matrix)
