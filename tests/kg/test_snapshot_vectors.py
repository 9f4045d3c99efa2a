"""A save's vector files (``kg.saved_vectors.write_gathered``): the rows asked for, in
their order, whatever part holds them; long runs of a mapped file's rows copied file to
file by the kernel, the rest gathered."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kg.saved_vectors
import kg.snapshot_file
from kg import EmbedFn, KnowledgeGraph
from kg.file_matrix import FileMatrix
from kg.row_matrix import RowMatrix
from kg.saved_vectors import write_gathered
from tests.kg.kg_testdata import supplied
from tests.kg.snapshot_checks import SNAPSHOT_FILES
from tests.kg.test_kg_load import assert_same_snapshot, saved  # noqa: F401  (the fixture)

DIM = 8


def kernel_copies(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """(file name, first row, rows) of each run copied file to file from here on."""
    copies: list[tuple[str, int, int]] = []
    copy = kg.saved_vectors.copy_rows

    def counting(matrix: np.ndarray, first: int, count: int, out: object) -> bool:
        copied = copy(matrix, first, count, out)  # type: ignore[arg-type]
        if copied:
            assert isinstance(matrix, FileMatrix)
            copies.append((Path(str(matrix.filename)).name, first, count))
        return copied

    monkeypatch.setattr(kg.saved_vectors, "copy_rows", counting)
    return copies


def mapped(tmp_path: Path, name: str, rows: int, seed: int) -> tuple[FileMatrix, np.ndarray]:
    values = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    np.save(tmp_path / name, values)
    return FileMatrix.open(tmp_path / name), values


def written(tmp_path: Path, matrix: RowMatrix, rows: np.ndarray) -> np.ndarray:
    with open(tmp_path / "out.npy", "wb") as out:
        write_gathered(matrix, rows, out)
    return np.load(tmp_path / "out.npy")


def test_runs_of_a_mapped_base_are_copied_and_the_rest_gathered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table after a start and a change: the mapped base, then rows in memory."""
    monkeypatch.setattr(kg.saved_vectors, "_COPY_RUN_ROWS", 100)
    monkeypatch.setattr(kg.saved_vectors, "_BLOCK_ROWS", 64)
    base, base_values = mapped(tmp_path, "base.npy", 3000, 1)
    tail = np.random.default_rng(2).normal(size=(500, DIM)).astype(np.float32)
    matrix, whole = RowMatrix(base, tail), np.concatenate([base_values, tail])
    copies = kernel_copies(monkeypatch)
    rows = np.concatenate(
        [
            np.arange(10, 1200),  # a long run: copied
            [3200, 5],  # a row in memory, a lone base row
            np.arange(1300, 1350),  # too short to copy
            np.arange(1400, 3000),  # a run that ends where the base does
            np.arange(3000, 3400),  # in memory: gathered however long
            np.arange(2900, 3000),  # exactly as long as a copied run must be
        ]
    ).astype(np.int32)
    np.testing.assert_array_equal(written(tmp_path, matrix, rows), whole[rows])
    assert copies == [("base.npy", 10, 1190), ("base.npy", 1400, 1600), ("base.npy", 2900, 100)]


def test_a_loaded_snapshot_s_rows_are_copied_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot read back maps its file as the tail, after an empty base."""
    monkeypatch.setattr(kg.saved_vectors, "_COPY_RUN_ROWS", 100)
    vectors, values = mapped(tmp_path, "nodes.npy", 1500, 3)
    copies = kernel_copies(monkeypatch)
    rows = np.arange(1500)
    np.testing.assert_array_equal(written(tmp_path, RowMatrix(vectors[:0], vectors), rows), values)
    assert copies == [("nodes.npy", 0, 1500)]


@pytest.mark.parametrize("order", ["strided", "reversed", "empty"])
def test_rows_in_no_run_are_gathered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    monkeypatch.setattr(kg.saved_vectors, "_COPY_RUN_ROWS", 2)
    base, values = mapped(tmp_path, "base.npy", 400, 4)
    copies = kernel_copies(monkeypatch)
    rows = {
        "strided": np.arange(400) * 7 % 400,  # every row, none next to the one before
        "reversed": np.arange(399, -1, -1),
        "empty": np.zeros(0, np.int64),
    }[order]
    got = written(tmp_path, RowMatrix(base, np.zeros((0, DIM), np.float32)), rows)
    np.testing.assert_array_equal(got, values[rows].reshape(-1, DIM))
    assert got.shape == (len(rows), DIM)
    assert copies == []


def test_a_stop_after_a_start_and_a_change_grows_the_mapped_files(
    saved: KnowledgeGraph,  # noqa: F811
    embed_fn: EmbedFn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End to end: a start maps the saved vector files, a change adds rows after them;
    the stop's save grows both files (neither copied nor written again:
    ``tests/kg/test_grown_vectors.py``), and the next start reads back the graph that
    was never closed."""
    saved.close()
    mapped = {p.name.split("-", 2)[2]: p.stat().st_ino for p in vector_files(saved.folder)}
    again = KnowledgeGraph(saved.folder, embed_fn)
    again.replace_documents({"new": supplied("new", ("Lyon", "lies on", "Rhone"))})
    saved.replace_documents({"new": supplied("new", ("Lyon", "lies on", "Rhone"))})
    monkeypatch.setattr(kg.saved_vectors, "_COPY_RUN_ROWS", 2)
    copies = kernel_copies(monkeypatch)
    again.close()
    assert copies == []
    grown = {p.name.split("-", 2)[2]: p.stat().st_ino for p in vector_files(saved.folder)}
    assert grown == mapped and set(grown) == set(SNAPSHOT_FILES)  # the table's files too
    assert_same_snapshot(KnowledgeGraph(saved.folder, embed_fn).snapshot, saved.snapshot)


def vector_files(folder: Path) -> list[Path]:
    return list(folder.glob(kg.snapshot_file.VECTOR_FILE.format(id="*", kind="*")))
