"""The snapshot's table of strings (``kg.saved_strings``) as two ``.npy`` files that grow:
the strings' UTF-8 bytes one after another, each ended by a NUL, and where each ends.

``snapshot.npz`` held the table as JSON, with each edge's text beside it, written whole at
every stop after a change: at 100,000 chunks 39.2 MB of a 61.5 MB file, at 1,000,000
chunks 385 MiB of 620 MB. The table only ever grows between compactions (a change appends
its new strings), so the files a start read it from hold all of it but the strings added
since: a save appends those (``kg.grown_file``) and renames the files for its snapshot, as
the vector files grow (``kg.saved_vectors``). Where the table was compacted, or no file
holds its first strings, both files are written anew.

Strings are read back a block at a time, the block decoded and split at its NULs
(``str.split``: 0.7 s for the 8.5 million strings of 1,000,000 chunks, where slicing
each by its offsets took 1.9 s and the JSON 0.9 s); a block whose strings hold a NUL of
their own is cut by the byte offsets instead. Lone surrogates, which JSON kept, are kept
(``surrogatepass``). None, which the table holds for a triple without a chunk, is saved
as an empty string and its place listed apart (``SavedTable.nones``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import IO

import numpy as np

from durable import atomic_write
from kg.grown_file import grow

#: The two files' kinds, as ``kg.saved_vectors.VECTOR_FILE`` names a snapshot's files.
TEXT, ENDS = "strings", "string-ends"
#: Strings encoded or decoded at a time.
_BLOCK = 65_536
_CODEC = ("utf-8", "surrogatepass")

PathOf = Callable[[str, str], Path]
"""A snapshot's file: (the snapshot's id, the file's kind) -> path."""

Strings = Sequence[str | None]


@dataclass(frozen=True)
class SavedTable:
    """The table's files of snapshot ``snapshot_id``: its first ``count`` strings, in
    ``size`` bytes; the places of its Nones (``snapshot.npz`` saves them: the files hold
    strings)."""

    snapshot_id: str
    count: int
    size: int
    nones: tuple[int, ...] = ()


def _nones(table: Strings, first: int) -> tuple[int, ...]:
    """The places of the table's Nones from ``first`` on."""
    return tuple(first + i for i, s in enumerate(table[first:]) if s is None)


def write(
    table: Strings, path_of: PathOf, snapshot_id: str, grown_from: SavedTable | None
) -> SavedTable:
    """Save ``table`` as the files of snapshot ``snapshot_id``: grown from the files of
    ``grown_from`` (which hold the table's first strings as they are) where it is given
    and they can grow, else written whole."""
    if grown_from is not None and grown_from.count <= len(table):
        grown = _grown(table, path_of, snapshot_id, grown_from)
        if grown is not None:
            return grown
    ends = _ends(table, 0, 0)
    size = int(ends[-1]) if len(ends) else 0
    atomic_write(path_of(snapshot_id, TEXT), partial(_write_text, table, 0, size))
    atomic_write(path_of(snapshot_id, ENDS), partial(np.save, arr=ends, allow_pickle=False))
    return SavedTable(snapshot_id, len(table), size, _nones(table, 0))


def _grown(
    table: Strings, path_of: PathOf, snapshot_id: str, base: SavedTable
) -> SavedTable | None:
    """The files of ``base`` grown by the strings after its ``count``; None where either
    cannot grow (it is not as ``base`` says, or its header has no room)."""
    ends = _ends(table, base.count, base.size)
    size = int(ends[-1]) if len(ends) else base.size
    text, at = partial(_text, table, base), partial(path_of, snapshot_id)
    if not grow(path_of(base.snapshot_id, TEXT), base.size, at(TEXT), text):
        return None
    if not grow(path_of(base.snapshot_id, ENDS), base.count, at(ENDS), _raw(ends)):
        return None  # the text file, renamed, is written anew over
    return SavedTable(snapshot_id, len(table), size, base.nones + _nones(table, base.count))


def _ends(table: Strings, first: int, offset: int) -> np.ndarray:
    """Where each string from ``first`` on ends (int64, its NUL included), its bytes
    after ``offset``."""
    lengths = np.ones(len(table) - first, np.int64)  # the NULs
    for start in range(first, len(table), _BLOCK):
        block = [s or "" for s in table[start : start + _BLOCK]]
        joined = "".join(block)
        at = start - first
        if joined.isascii():
            lengths[at : at + len(block)] += np.fromiter(map(len, block), np.int64, len(block))
        else:
            sizes = (len(s.encode(*_CODEC)) for s in block)
            lengths[at : at + len(block)] += np.fromiter(sizes, np.int64, len(block))
    return offset + np.cumsum(lengths)


def _blocks(table: Strings, first: int) -> Iterator[bytes]:
    for start in range(first, len(table), _BLOCK):
        block = [s or "" for s in table[start : start + _BLOCK]]
        yield ("\0".join(block) + "\0").encode(*_CODEC)


def _write_text(table: Strings, first: int, size: int, out: IO[bytes]) -> None:
    header = {"descr": "|u1", "fortran_order": False, "shape": (size,)}
    np.lib.format.write_array_header_1_0(out, header)
    for block in _blocks(table, first):
        out.write(block)


def _text(table: Strings, base: SavedTable, out: IO[bytes]) -> None:
    for block in _blocks(table, base.count):
        out.write(block)


def _raw(ends: np.ndarray) -> Callable[[IO[bytes]], object]:
    return lambda out: out.write(ends.astype("<i8", copy=False).tobytes())


def read(path_of: PathOf, saved: SavedTable) -> list[str | None]:
    """The table ``write`` saved. ``ValueError`` where the files do not hold it (another
    count or size, ends out of order, Nones out of it), ``OSError`` where one is
    missing."""
    ends = np.load(path_of(saved.snapshot_id, ENDS), mmap_mode="r", allow_pickle=False)
    text = np.load(path_of(saved.snapshot_id, TEXT), mmap_mode="r", allow_pickle=False)
    if ends.dtype != np.int64 or ends.shape != (saved.count,) or text.shape != (saved.size,):
        raise ValueError(f"the table's files hold {ends.shape} strings in {text.shape} bytes")
    if saved.count and (int(ends[-1]) != saved.size or np.any(np.diff(ends) < 1) or ends[0] < 1):
        raise ValueError("the table's string ends are out of order")
    if saved.nones and (min(saved.nones) < 0 or max(saved.nones) >= saved.count):
        raise ValueError("the table's Nones are out of it")
    table: list[str | None] = []
    for start in range(0, saved.count, _BLOCK):
        stop = min(start + _BLOCK, saved.count)
        first = int(ends[start - 1]) if start else 0
        bounds = (np.asarray(ends[start:stop]) - first).tolist()
        table.extend(_decoded(bytes(text[first : first + bounds[-1]]), [0, *bounds]))
    for place in saved.nones:
        table[place] = None
    return table


def _decoded(raw: bytes, bounds: list[int]) -> list[str]:
    """The strings of ``raw`` between consecutive ``bounds`` (byte offsets, each string's
    NUL before the next bound)."""
    strings = raw.decode(*_CODEC).split("\0")
    if len(strings) == len(bounds) and not strings[-1]:  # no NUL but the strings' own
        strings.pop()
        return strings
    return [raw[a : b - 1].decode(*_CODEC) for a, b in pairwise(bounds)]
