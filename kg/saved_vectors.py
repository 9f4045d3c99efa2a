"""A graph snapshot's vector files, written at a clean stop (``kg.snapshot_file``): each
grown from the file the start mapped where it can be, else written anew, its rows
gathered a block at a time and its long runs of mapped rows copied file to file.

A stop after a one-document change at 1,000,000 chunks wrote the triples' vectors (4.9
GB) and the entities' (3.2 GB) whole again. Rows once written never change (an
embedding table gives a new vector a new row: ``kg.embeddings``), so the files the
start mapped hold the rows as they are; the save appends the rows written since
(``kg.grown_file``) and the snapshot records each item's row in the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, TypeGuard

import numpy as np

from durable import atomic_write
from kg.file_matrix import FileMatrix, copy_rows, grow_file
from kg.row_matrix import RowMatrix
from kg.vector_rows import VectorRows

#: The vector files of the snapshot with id ``id`` (``nodes`` or ``triples``).
VECTOR_FILE = "snapshot-{id}-{kind}.npy"

_BLOCK_ROWS = 16_384
#: Runs of at least this many consecutive rows of a vector file a save copies file to
#: file (``write_gathered``); shorter ones it gathers with the rows around them.
_COPY_RUN_ROWS = 1_024
#: A save writes a vector file anew, rather than growing it, once rows no item reads
#: pass this share of it (``write_vectors``).
_DEAD_SHARE = 0.25


@dataclass(frozen=True)
class FileRows:
    """A saved vector file's rows: ``source``, the matrix row each file row holds, in
    file order; ``item_rows``, each item's row in the file; ``grown_from``, the id of
    the snapshot whose file it grew from (None: written anew)."""

    source: np.ndarray
    item_rows: np.ndarray
    grown_from: str | None = None


def write_vectors(
    folder: Path, vectors: VectorRows, snapshot_id: str, kind: str, may_grow: bool
) -> FileRows:
    """Write the snapshot's vector file of ``kind`` (``nodes``, ``triples``); return
    which rows it holds and where each item's is.

    Where ``may_grow`` (no saved snapshot names the folder's vector files: a change
    removed it, ``kg.snapshot_file.discard``) and the rows the items read are mostly
    those of the vector file of that kind the start mapped, that file grows: the rows
    written since are appended and it is renamed for this snapshot
    (``kg.file_matrix.grow_file``). Its
    rows no item reads any longer (a removed document's entities and facts) stay,
    unread, until they pass ``_DEAD_SHARE`` of it; then, or where there is no such
    file, the rows the items read are written to a new file, in row order."""
    path = folder / VECTOR_FILE.format(id=snapshot_id, kind=kind)
    grown = _grown_rows(folder, vectors, kind) if may_grow else None
    if grown is not None:
        added = grown.source[len(vectors.matrix.base) :]
        if grow_file(vectors.matrix.base, path, partial(_write_rows, vectors.matrix, added)):
            return grown
    used, item_rows = distinct_rows(vectors.rows, len(vectors.matrix))
    atomic_write(path, partial(write_gathered, vectors.matrix, used))
    return FileRows(used, item_rows)


def _grown_rows(folder: Path, vectors: VectorRows, kind: str) -> FileRows | None:
    """For a file grown from the one ``vectors``' matrix maps (its base): its rows (the
    base's, then those appended: rows of the matrix, ascending) and each item's row in
    it; None where it cannot grow (it must be one of the folder's vector files of
    ``kind``) or should not (too many rows no item reads)."""
    base = vectors.matrix.base
    if not _reads_file(base) or not len(base):
        return None
    name = Path(base.filename or "")
    if not (name.match(VECTOR_FILE.format(id="*", kind=kind)) and _in(folder, name)):
        return None
    split = len(base)
    rows = np.asarray(vectors.rows, np.int64)
    old = rows < split
    read = np.zeros(split, bool)
    read[rows[old]] = True
    if split - np.count_nonzero(read) > _DEAD_SHARE * split:
        return None
    added, placed = distinct_rows(rows[~old] - split, len(vectors.matrix) - split)
    added += split
    item_rows = rows.copy()
    item_rows[~old] = split + placed
    source = np.concatenate([np.arange(split, dtype=np.int64), added])
    grown_from = name.name.removeprefix("snapshot-").removesuffix(f"-{kind}.npy")
    return FileRows(source, item_rows, grown_from)


def distinct_rows(rows: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, return_inverse=True)`` for rows in ``range(size)``, from a mask
    of the rows taken: the distinct rows ascending, and each item's place among them.
    For the 3.2 million triple rows of a save at 1,000,000 chunks numpy 2.3's
    ``np.unique`` took 0.4-1.1 s (2.2-2.4 s without ``return_inverse``) on a 2-core
    EPYC; a mask of them about 10 ms."""
    taken = np.zeros(size, bool)
    taken[rows] = True
    place = np.cumsum(taken) - 1
    return np.flatnonzero(taken).astype(rows.dtype, copy=False), place[rows]


def _in(folder: Path, path: Path) -> bool:
    try:
        return path.parent.samefile(folder)
    except OSError:
        return False


def write_gathered(matrix: RowMatrix, rows: np.ndarray, out: IO[bytes]) -> None:
    """``matrix[rows]`` as one ``.npy`` float32 matrix, gathered a block at a time rather
    than copied whole first: at 1,000,000 chunks the graph's vectors are 8 GB, which a
    clean stop would otherwise have held in memory twice. Long runs of consecutive rows
    of a part mapped from a file (the vector files a start mapped: most rows of a save)
    are copied file to file instead (``kg.file_matrix.copy_rows``)."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (len(rows), matrix.shape[1])}
    np.lib.format.write_array_header_1_0(out, header)
    written = 0
    for start, stop, part, first in _file_runs(matrix, rows):
        _write_rows(matrix, rows[written:start], out)
        if not copy_rows(part, first, stop - start, out):
            _write_rows(matrix, rows[start:stop], out)
        written = stop
    _write_rows(matrix, rows[written:], out)


def _write_rows(matrix: RowMatrix, rows: np.ndarray, out: IO[bytes]) -> None:
    for start in range(0, len(rows), _BLOCK_ROWS):
        out.write(matrix[rows[start : start + _BLOCK_ROWS]].astype("<f4").tobytes())


def _file_runs(matrix: RowMatrix, rows: np.ndarray) -> Iterator[tuple[int, int, FileMatrix, int]]:
    """The runs of at least ``_COPY_RUN_ROWS`` of ``rows`` that are consecutive rows of
    one of ``matrix``'s parts that reads its file: where the run is in ``rows`` (start,
    stop), the part, and the run's first row in it. Rows in any other order (the
    entities' after a start from the rows) are left to be gathered."""
    split = len(matrix.base)
    parts = [(matrix.base, 0), (matrix.tail, split)]
    if not len(rows) or not any(_reads_file(part) for part, _ in parts):
        return
    rows = np.asarray(rows, np.int64)
    breaks = np.flatnonzero((np.diff(rows) != 1) | (rows[1:] == split)) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [len(rows)]])
    long = np.flatnonzero(stops - starts >= _COPY_RUN_ROWS)
    for start, stop in zip(starts[long].tolist(), stops[long].tolist(), strict=True):
        part, offset = parts[0] if rows[start] < split else parts[1]
        if _reads_file(part):
            yield start, stop, part, int(rows[start]) - offset


def _reads_file(part: object) -> TypeGuard[FileMatrix]:
    return isinstance(part, FileMatrix) and part.reads_file
