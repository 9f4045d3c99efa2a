"""Rows appended to a saved ``.npy`` file in place, its header's row count set to match.

A clean stop after a change saves the graph's snapshot again; its large files (the
entities' and the triples' vectors, the entities' codes) are mostly the rows the start
read back, and rewriting them cost a stop after a one-document change 8 GB of writes at
1,000,000 chunks. Growing the file writes the rows added since and the header alone.
numpy pads a version 1.0 header to a multiple of 64 bytes, so the header always has
room for a larger row count.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np


def grow(
    path: Path,
    rows: int,
    to: Path,
    write: Callable[[IO[bytes]], object],
    *,
    same_as: int | None = None,
) -> bool:
    """Append rows to the ``.npy`` file at ``path`` (C order, ``rows`` rows of any width
    and dtype) through ``write``, set the header's row count to match and rename the
    file ``to``: the rows already there are neither read nor written again.

    False, with the file as it was, where it is not such a file (another row count, a
    header of another version, shorter than its rows), where ``same_as`` (an open file
    descriptor) is given and the file at ``path`` is another, or where the header has no
    room for the new count: the caller writes a new file. Other errors (a full disk) are
    raised, the file then cut back to its rows. Nothing else may read the file by its
    name or header while it grows."""
    try:
        handle = path.open("r+b")
    except OSError:
        return False
    with handle:
        here = os.fstat(handle.fileno())
        if same_as is not None and not os.path.samestat(here, os.fstat(same_as)):
            return False
        layout = _layout(handle)
        if layout is None or layout[0][0] != rows:
            return False
        shape, dtype, offset = layout
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        end = offset + rows * row_bytes
        if here.st_size < end or not row_bytes:
            return False
        try:
            handle.seek(end)
            handle.truncate()  # what a save cut short appended
            write(handle)
            handle.flush()
            added, rest = divmod(handle.tell() - end, row_bytes)
            header = npy_header((rows + added, *shape[1:]), dtype, offset)
            if rest or header is None:
                handle.truncate(end)
                return False
            handle.seek(0)
            handle.write(header)
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:
            handle.truncate(end)
            raise
    os.replace(path, to)
    return True


def npy_header(shape: tuple[int, ...], dtype: np.dtype[Any], data_offset: int) -> bytes | None:
    """A version 1.0 ``.npy`` header of a C-order array of ``shape`` and ``dtype``
    exactly ``data_offset`` bytes long (the length of the one it replaces), or None where
    it does not fit."""
    descr = np.lib.format.dtype_to_descr(dtype)
    text = repr({"descr": descr, "fortran_order": False, "shape": shape})
    room = data_offset - 10  # the magic string, the version and the header's length
    if not 0 < len(text) < room <= 0xFFFF:
        return None
    padded = text + " " * (room - len(text) - 1) + "\n"
    return np.lib.format.magic(1, 0) + room.to_bytes(2, "little") + padded.encode("latin1")


def _layout(handle: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any], int] | None:
    """The shape, dtype and data offset of the C-order version 1.0 ``.npy`` file open in
    ``handle``; None where it is not one."""
    try:
        if np.lib.format.read_magic(handle) != (1, 0):
            return None
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    except ValueError:
        return None
    if fortran or not shape or dtype.hasobject:
        return None
    return tuple(shape), dtype, handle.tell()
