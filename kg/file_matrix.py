"""A float32 matrix mapped from a whole ``.npy`` file whose chosen rows are read from the file.

A fact selection scores the triple vectors of its candidate edges (``kg.subgraph``):
about 2,000 rows a question, scattered over a file of 5 GB at 1,000,000 chunks. Read
through the mapping, each row faults its page in, and the kernel maps the pages around
it that the page cache holds as well (fault-around, 64 KiB), so one row of 1.5 KB brought
some 43 into the process. After 300 questions nearly the whole file was mapped: 9.1 GiB
of RSS against 4.0 GiB of the process's own memory. ``madvise(MADV_RANDOM)`` stops
readahead, not fault-around (measured: the same RSS).

Read with ``pread``, the same rows come from the same page cache and nothing is mapped.
It costs about 1.9 µs a row on the 2-core host (3.8 ms for 2,000 random rows of a cached
file, against 0.6 ms through a mapping whose pages are already in); rows in a run (a
save's blocks, a coding pass) are read by one call each. Scattered rows are announced first
(``POSIX_FADV_WILLNEED``), so that those not in the page cache are read from the disk
side by side: 2,000 rows of a file out of the cache took 26 ms so, 112 ms one read
after another. (A mapping's first fault on a file out of the cache read 128 KiB around
each row: 3.3 s for the first 2,000 rows, 8.7 ms a question after that.) The file is
opened when the matrix is, so a file removed later (a newer snapshot replaces it) is
still read, as its mapping is.

Only the object ``open`` returns reads from the file: a slice or a view of it reads
through the mapping, as any ``np.memmap`` does.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

_MAX_READ = 1 << 26
"""The most one read asks for (64 MiB)."""


class FileMatrix(np.memmap):
    """A read-only float32 matrix mapped from a whole ``.npy`` file, which also reads
    rows from the file itself (``rows``, ``blocks``): module docstring."""

    _fd: int | None = None
    _data_offset: int = 0

    @classmethod
    def open(cls, path: Path) -> FileMatrix:
        """Map ``path`` read-only; ValueError unless it holds a C-ordered float32 matrix."""
        mapped = np.load(path, mmap_mode="r")
        if mapped.dtype != np.float32 or mapped.ndim != 2 or not mapped.flags.c_contiguous:
            raise ValueError(f"{path.name}: {mapped.dtype} {mapped.shape}, not float32 rows")
        matrix = mapped.view(cls)
        fd = os.open(path, os.O_RDONLY)
        matrix._fd, matrix._data_offset = fd, int(mapped.offset)
        weakref.finalize(matrix, os.close, fd)
        return matrix

    def __array_finalize__(self, obj: Any) -> None:
        super().__array_finalize__(obj)
        self._fd = None  # a slice, view or copy: it reads through the mapping, if any

    @property
    def reads_file(self) -> bool:
        """Whether rows are read from the file (the matrix ``open`` returned)."""
        return self._fd is not None

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """A new array with ``rows`` (an index array, as ``matrix[rows]``), from file reads."""
        rows = np.asarray(rows, dtype=np.int64)
        count, dim = self.shape
        flat = np.where(rows < 0, rows + count, rows).ravel()
        if flat.size and (flat.min() < 0 or flat.max() >= count):
            raise IndexError(f"rows out of range for {count} rows")
        if self._fd is None:
            raise ValueError("this matrix reads through its mapping, not its file")
        spans = _spans(flat, dim * 4, self._data_offset)
        if len(spans) > 1:
            _advise(self._fd, spans)
        # One read per run of consecutive rows, joined in one copy: reading into slices
        # of the result cost 5.3 ms for 2,000 rows, this 3.8 ms.
        data = bytearray().join([os.pread(self._fd, size, at) for at, size in spans])
        if len(data) != flat.size * dim * 4:
            raise OSError(f"{self.filename}: the file ends before its rows")
        return np.frombuffer(data, np.float32).reshape(*rows.shape, dim)

    def blocks(self, block_rows: int) -> Iterator[np.ndarray]:
        """Every row, in order, ``block_rows`` at a time, from file reads."""
        for start in range(0, len(self), block_rows):
            yield self.rows(np.arange(start, min(start + block_rows, len(self))))


def _spans(rows: np.ndarray, row_bytes: int, data_offset: int) -> list[tuple[int, int]]:
    """(offset, bytes) of each run of consecutive ``rows``, in order; a run longer than
    ``_MAX_READ`` in pieces (a read returns at most 2 GiB)."""
    starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
    sizes = np.diff(starts, append=rows.size) * row_bytes
    offsets = rows[starts] * row_bytes + data_offset
    if not sizes.size or sizes.max() <= _MAX_READ:
        return list(zip(offsets.tolist(), sizes.tolist(), strict=True))
    spans: list[tuple[int, int]] = []
    for at, size in zip(offsets.tolist(), sizes.tolist(), strict=True):
        pieces = range(0, size, _MAX_READ)
        spans.extend((at + piece, min(_MAX_READ, size - piece)) for piece in pieces)
    return spans


def _advise(fd: int, spans: list[tuple[int, int]]) -> None:
    """Ask for every span before reading any: the kernel reads the pages not in the page
    cache side by side, where each read would otherwise wait for its own (2,000
    scattered rows of a file out of the cache: 26 ms, against 112 ms)."""
    if hasattr(os, "posix_fadvise"):
        for at, size in spans:
            os.posix_fadvise(fd, at, size, os.POSIX_FADV_WILLNEED)


def take_rows(matrix: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``matrix[rows]`` as a new array: from file reads where ``matrix`` is a
    ``FileMatrix`` that reads its file, so that no page of it is mapped in."""
    if isinstance(matrix, FileMatrix) and matrix.reads_file:
        return matrix.rows(rows)
    return np.asarray(matrix[rows])
