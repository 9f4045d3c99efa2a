"""A table's matrix of float32 rows, in two parts: the base a start adopted (mapped from the
saved snapshot's file) and the rows written since (``kg.tail_rows``), with their int8
codes where the table keeps them."""

from __future__ import annotations

from typing import Any

import numpy as np

from kg.best_rows import Best
from kg.code_parts import estimate, gather, screen
from kg.file_matrix import Rows, take_rows
from kg.int8_rows import FLOAT_SLACK, blocks
from kg.lead_rows import Codes, rotation_of
from kg.rotation import Rotation


def dot_rows(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Row-wise dot products without BLAS.

    A multi-threaded BLAS matrix-vector product was 6x slower than this on a busy 2-core
    machine (threads spin waiting for cores), and its summation order can depend on the thread
    count; einsum runs on the calling thread, in a fixed order, row by row.
    """
    return np.einsum("ij,j->i", matrix, vector)


def _dot_part(part: Rows, vector: np.ndarray) -> np.ndarray:
    """``dot_rows`` of a part in memory; of one on the disk, a block at a time."""
    if type(part) is np.ndarray:
        return dot_rows(part, vector)
    return np.concatenate([dot_rows(b, vector) for b in blocks(part)] or [np.zeros(0, np.float32)])


class RowMatrix:
    """Rows ``[0, len(base))`` in ``base``, the rest in ``tail``: a table's matrix.

    ``base`` is what a start adopted as it was, read-only: a matrix the saved snapshot maps
    from its file (``kg.snapshot_file``), so the vectors stay on the page cache instead of
    in the process's own memory (780 MiB at 323,000 triples). The rows a query asks for
    are read from that file (``kg.file_matrix``), not through the mapping, which kept
    every page they touched in the process's RSS. ``tail`` holds the rows written since,
    in memory, and past a size in a file read the same way (``kg.tail_rows``).

    ``codes``, where the table keeps them, are the int8 codes of ``base``'s rows and of
    ``tail``'s (``kg.int8_rows``, turned where there are many: ``kg.lead_rows``): a scan
    of every row reads those instead.
    """

    __slots__ = ("base", "codes", "tail")

    def __init__(
        self, base: np.ndarray, tail: Rows, codes: tuple[Codes, Codes] | None = None
    ) -> None:
        self.base = base
        self.tail = tail
        self.codes = codes

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), int(self.tail.shape[1]) if self.tail.ndim == 2 else 0)

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return len(self.base) + len(self.tail)

    def __getitem__(self, rows: Any) -> np.ndarray:
        """A new array with ``rows`` (an index array), from either part (a mapped part's
        rows with file reads: ``kg.file_matrix.take_rows``)."""
        rows = np.asarray(rows, dtype=np.int64)
        split = len(self.base)
        if not split:
            return take_rows(self.tail, rows)
        if not len(self.tail):
            return take_rows(self.base, rows)
        out = np.empty((*rows.shape, self.shape[1]), np.float32)
        low = rows < split
        out[low] = take_rows(self.base, rows[low])
        out[~low] = take_rows(self.tail, rows[~low] - split)
        return out

    @property
    def rotation(self) -> Rotation | None:
        """The rotation the codes' turned parts share (None: plain, or no codes)."""
        turned = (rotation_of(part) for part in self.codes or ())
        return next((r for r in turned if r is not None), None)

    def codes_of(self, rows: np.ndarray) -> Codes | None:
        """The int8 codes of ``rows`` (an index array), in that order; None without codes
        or where the parts are coded differently (``kg.code_parts.gather``), with their
        cell order made for a screen to read."""
        return None if self.codes is None else gather(self.codes, rows)

    def dot(self, vector: np.ndarray) -> np.ndarray:
        """Every row's dot product with ``vector``."""
        parts = [self.base, self.tail] if len(self.base) else [self.tail]
        return np.concatenate([_dot_part(part, vector) for part in parts])

    def estimate(self, vector: np.ndarray) -> tuple[np.ndarray, float]:
        """Every row's dot product with ``vector``, each within the returned slack of
        the exact one: from the codes where there are codes, else exact (float32)."""
        if self.codes is None:
            return self.dot(vector), FLOAT_SLACK
        return estimate(self.codes, vector)

    def screen(
        self, vector: np.ndarray, floor: float, best: Best | None = None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The rows (ascending) whose exact dot product with ``vector`` can reach
        ``floor``, their estimates, and the slack, as ``estimate``'s (turned codes drop
        most rows after their leading values, and with ``best`` those that cannot be
        among the best: ``kg.lead_rows``)."""
        if self.codes is None:
            every = self.dot(vector)
            rows = np.flatnonzero(every >= floor - FLOAT_SLACK)
            return rows, every[rows], FLOAT_SLACK
        return screen(self.codes, vector, floor, best)
