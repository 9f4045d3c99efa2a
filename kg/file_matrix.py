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

The rows a running graph adds are read the same way once they pass a size
(``kg.tail_rows``): appended to a ``RowFile`` of no name, and read back through a
``SpilledMatrix``, a view of its first rows and of those still in memory.
"""

from __future__ import annotations

import errno
import os
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from kg import grown_file

_MAX_READ = 1 << 26
"""The most one read asks for (64 MiB)."""
#: Reads that wait for no disk can be asked for (``_read_cached``): Linux, most file systems.
_NOWAIT = hasattr(os, "preadv") and hasattr(os, "RWF_NOWAIT")
#: Files can be copied file to file in the kernel (``copy_rows``): Linux.
_KERNEL_COPY = hasattr(os, "copy_file_range")
#: What ``os.copy_file_range`` raises where the kernel or the file systems cannot copy so
#: (``copy_rows`` then copies nothing and says so).
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}


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
        data = read_rows(self._fd, flat, dim, self._data_offset, str(self.filename))
        return data.reshape(*rows.shape, dim)

    def blocks(self, block_rows: int) -> Iterator[np.ndarray]:
        """Every row, in order, ``block_rows`` at a time, from file reads."""
        for start in range(0, len(self), block_rows):
            yield self.rows(np.arange(start, min(start + block_rows, len(self))))


def copy_rows(matrix: np.ndarray, first: int, count: int, out: IO[bytes]) -> bool:
    """Append rows ``[first, first + count)`` of ``matrix`` to ``out`` file to file in
    the kernel (``os.copy_file_range``), where ``matrix`` is a ``FileMatrix`` that reads
    its file and ``out`` a file: no byte passes through this process, and the rows need
    no gathering. A save's vector files are mostly such runs (the rows a start mapped, in
    order): the triple vectors' file at 100,000 chunks (473 MB) was written in 0.8-0.9 s
    so, against 2.0-4.2 s read, gathered and written (2-core host, fsync included).

    False, with ``out`` as it was, where either cannot be copied so (the caller writes
    the rows itself); other errors (a full disk) are raised."""
    if not (_KERNEL_COPY and isinstance(matrix, FileMatrix) and matrix._fd is not None):
        return False
    if not 0 <= first <= first + count <= len(matrix):
        raise IndexError(f"rows [{first}, {first + count}) out of range for {len(matrix)} rows")
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # not a file (io.UnsupportedOperation is both)
        return False
    row_bytes = int(matrix.shape[1]) * 4
    source, size = matrix._data_offset + first * row_bytes, count * row_bytes
    out.flush()
    start = out.tell()
    done = 0
    try:
        while done < size:
            copied = os.copy_file_range(matrix._fd, fd, size - done, source + done, start + done)
            if not copied:
                raise OSError(f"{matrix.filename}: the file ends before its rows")
            done += copied
    except OSError as exc:
        if exc.errno not in _NO_KERNEL_COPY:
            raise
        out.seek(start)
        out.truncate()
        return False
    out.seek(start + size)
    return True


def grow_file(matrix: np.ndarray, to: Path, write: Callable[[IO[bytes]], object]) -> bool:
    """Append rows to the ``.npy`` file that ``matrix`` (a ``FileMatrix`` that reads its
    file) maps, through ``write``, set the header's row count to match and rename the
    file ``to``: the rows already there are neither read nor written again. A clean
    stop's triple vectors are mostly rows of the file the start mapped (4.9 GB at
    1,000,000 chunks, rewritten by every stop after a change).

    False, with the file as it was, where ``matrix`` does not read a file, the file at
    its name is no longer the one it reads, or the header has no room for the new count
    (the caller writes a new file); other errors (a full disk) are raised, the file
    then cut back to its rows. The file must be one nothing else reads by its name or
    header while it grows: the caller's (``kg.snapshot_file``)."""
    if not (isinstance(matrix, FileMatrix) and matrix._fd is not None):
        return False
    return grown_file.grow(Path(matrix.filename or ""), len(matrix), to, write, same_as=matrix._fd)


def read_rows(fd: int, rows: np.ndarray, dim: int, data_offset: int, name: str) -> np.ndarray:
    """(len(rows), dim) float32 rows read from the file ``fd`` (rows of ``dim`` values
    from ``data_offset`` on; ``rows`` in range)."""
    spans = _spans(rows, dim * 4, data_offset)
    data = _read_cached(fd, spans, rows.size * dim * 4) if len(spans) > 1 else None
    if data is None:
        if len(spans) > 1:
            _advise(fd, spans)
        # One read per run of consecutive rows, joined in one copy: reading into slices
        # of the result cost 5.3 ms for 2,000 rows, this 3.8 ms.
        data = bytearray().join([os.pread(fd, size, at) for at, size in spans])
    if len(data) != rows.size * dim * 4:
        raise OSError(f"{name}: the file ends before its rows")
    return np.frombuffer(data, np.float32).reshape(rows.size, dim)


def _read_cached(fd: int, spans: list[tuple[int, int]], total: int) -> bytearray | None:
    """The spans read, those in the page cache first without waiting (``RWF_NOWAIT``),
    then the others announced together and read; None where the file system cannot
    read so (the caller reads the spans as before).

    Announcing every span first cost a call a span even where the page cache held them
    all, as it does for a service's questions: 2,000 random rows of the 5 GB triple
    file at 1,000,000 chunks, 5.1 ms announced then read, 4.4 ms so."""
    global _NOWAIT
    if not _NOWAIT:
        return None
    data = bytearray(total)
    view = memoryview(data)
    missed: list[tuple[int, int, int]] = []  # (place in data, offset in file, bytes)
    place = 0
    for at, size in spans:
        try:
            done = os.preadv(fd, [view[place : place + size]], at, os.RWF_NOWAIT)
        except BlockingIOError:  # none of it in the page cache
            done = 0
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            _NOWAIT = False
            return None
        if done < size:
            missed.append((place + done, at + done, size - done))
        place += size
    if missed:
        _advise(fd, [(at, size) for _, at, size in missed])
    for place, at, size in missed:
        while size:
            done = os.preadv(fd, [view[place : place + size]], at)
            if not done:
                return data[:place]  # the file ends here: the caller says so
            place, at, size = place + done, at + done, size - done
    return data


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


class RowFile:
    """Float32 rows appended to a file of no name in ``folder`` (``O_TMPFILE``: a crash
    leaves nothing behind, and its space is freed when the last reader lets go of it),
    read back with ``pread`` as a ``FileMatrix``'s rows are. Rows once written never
    change, so a reader of the first ``n`` needs no lock against later appends."""

    def __init__(self, folder: Path, dim: int) -> None:
        """OSError where the folder takes no file."""
        self.dim = dim
        self.count = 0  # rows written
        self.name = f"a vector file in {folder}"
        self._fd = _unnamed_file(folder)
        weakref.finalize(self, os.close, self._fd)

    def append(self, rows: np.ndarray) -> None:
        """Write ``rows`` (n, dim) after the others; OSError (the disk full) leaves
        ``count`` as it was."""
        data = np.ascontiguousarray(rows, "<f4").data.cast("B")
        at = self.count * self.dim * 4
        while data:
            written = os.pwrite(self._fd, data, at)
            data, at = data[written:], at + written
        self.count += len(rows)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """(len(rows), dim) of rows below ``count`` (an index array, in range)."""
        return read_rows(self._fd, np.asarray(rows, np.int64), self.dim, 0, self.name)


def _unnamed_file(folder: Path) -> int:
    """A file descriptor of a new file in ``folder`` that no name reaches."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is not None:
        try:
            return os.open(folder, flag | os.O_RDWR, 0o600)
        except OSError as exc:  # a file system without it says so in one of these
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    fd, path = tempfile.mkstemp(dir=folder, prefix=".vectors-", suffix=".f32")
    os.unlink(path)
    return fd


class SpilledMatrix:
    """The first ``written`` rows of a ``RowFile``, then ``memory``'s: a table's rows
    written while it runs, most of them on the disk (``kg.tail_rows``). Read-only, and
    a view at a moment: later appends to the file are past ``written``."""

    __slots__ = ("file", "memory", "written")

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, file: RowFile, written: int, memory: np.ndarray) -> None:
        self.file = file
        self.written = written
        self.memory = memory

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.file.dim)

    def __len__(self) -> int:
        return self.written + len(self.memory)

    def __getitem__(self, rows: Any) -> np.ndarray:
        """Rows by an index array, or a slice of rows, as a new array."""
        if isinstance(rows, slice):
            return self.rows(np.arange(len(self))[rows])
        return self.rows(rows)

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """A new array with ``rows`` (an index array): the file's with file reads."""
        rows = np.asarray(rows, dtype=np.int64)
        flat = np.where(rows < 0, rows + len(self), rows).ravel()
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"rows out of range for {len(self)} rows")
        out = np.empty((flat.size, self.file.dim), np.float32)
        on_file = flat < self.written
        if on_file.any():
            out[on_file] = self.file.rows(flat[on_file])
        if not on_file.all():
            out[~on_file] = self.memory[flat[~on_file] - self.written]
        return out.reshape(*rows.shape, self.file.dim)

    def blocks(self, block_rows: int) -> Iterator[np.ndarray]:
        """Every row, in order, ``block_rows`` at a time."""
        for start in range(0, len(self), block_rows):
            yield self.rows(np.arange(start, min(start + block_rows, len(self))))


#: A table's rows: in memory, mapped from a file, or on the disk and in memory.
Rows = np.ndarray | SpilledMatrix


def take_rows(matrix: Rows, rows: np.ndarray) -> np.ndarray:
    """``matrix[rows]`` as a new array: from file reads where ``matrix`` is a
    ``FileMatrix`` that reads its file, or a ``SpilledMatrix``, so that no page of it is
    mapped in."""
    if isinstance(matrix, SpilledMatrix) or (isinstance(matrix, FileMatrix) and matrix.reads_file):
        return matrix.rows(rows)
    return np.asarray(matrix[rows])
