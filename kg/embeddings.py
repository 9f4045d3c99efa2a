"""Embeddings of node names and triple texts, as tables of rows (the graph's file persists them).

Vectors are computed once, when a triple first enters the graph, through an injected
``embed`` function; a restart loads them from disk instead of re-embedding: after a clean
stop, mapped from the saved snapshot's files (``kg.snapshot_file``), else read from the
graph's file into memory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from kg.int8_rows import Int8Rows, write_all
from kg.lead_rows import Codes, LeadRows, code_rows, fit_rotation, rotation_of
from kg.numbering import INDEX
from kg.rotation import Rotation
from kg.row_matrix import RowMatrix
from kg.tail_rows import TailRows

log = logging.getLogger(__name__)

EmbedFn = Callable[[Sequence[str]], np.ndarray]
"""Maps texts to a (len(texts), dim) array of L2-normalized rows."""


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Return float32 rows scaled to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


def embed_checked(embed: EmbedFn, texts: Sequence[str]) -> np.ndarray:
    """Call ``embed`` and check its shape; rows are re-normalized to guard cosine scores."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    vectors = np.asarray(embed(list(texts)))
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise ValueError(
            f"embed returned shape {vectors.shape} for {len(texts)} texts; expected (n, dim)"
        )
    return normalize_rows(vectors)


def _rows_of(rows: np.ndarray, keys: int, matrix: np.ndarray) -> bool:
    """``rows`` are ``keys`` distinct rows of ``matrix``, ascending, and ``matrix`` is
    read-only (its rows no key names stay where they are)."""
    return (
        not matrix.flags.writeable
        and len(rows) == keys
        and (not keys or (int(rows[0]) >= 0 and int(rows[-1]) < len(matrix)))
        and bool(np.all(np.diff(rows) > 0))
    )


class EmbeddingTable:
    """A key -> vector map stored as one matrix, so lookups gather rows without copying dicts.

    A row, once written, is never written again while the table keeps that matrix: a new
    vector goes to a new row, a dropped key's row is left as it was. So the read-only
    ``GraphSnapshot`` refers to rows of ``matrix`` instead of copying them (at 323,000
    triples, the copies were 780 MiB and 2 s of every change), and a query reading an older
    snapshot never sees a row change under it. Dropped rows are reclaimed by compaction into
    a new matrix (``token`` changes: row numbers taken before it no longer apply). The
    matrix grows by a quarter at a time: doubling left up to half of it unused.

    A table ``adopt`` made over a read-only matrix (one mapped from a file) keeps it as the
    ``RowMatrix``'s base and writes new rows after it, in memory, and past a size in a
    file of no name in the folder ``spill_to`` names (``kg.tail_rows``). Compaction moves
    only the rows written after the base: the base's dropped rows cost no memory of the
    process's own, and the next clean stop saves the snapshot without them.

    A ``quantized`` table also keeps every row's int8 codes (``kg.int8_rows``), in memory:
    the entities' table, whose every row a question's similarity scan reads. Its rows are
    coded turned (``kg.lead_rows``) once it is coded from many at a time (its load, or a
    start's first block of rows), by one rotation for all its parts. Rows added a few at a
    time are coded again, turned and then filed in cells, as the in-memory part grows past
    what a start would code so (``_code_again``): that part then has a rotation of its own
    where the base's had none, or no cells.
    """

    #: Compact once dropped rows exceed this share of the live ones (and ``_MIN_DEAD``).
    _DEAD_SHARE = 0.25
    _MIN_DEAD = 1024

    def __init__(
        self, dim: int | None = None, *, quantized: bool = False, rotation: Rotation | None = None
    ) -> None:
        """``rotation``: the one the table's codes were turned by before (kept in the
        graph's folder: ``kg.axes_file``), for rows coded from now on."""
        self._dim = dim
        self._quantized = quantized
        self._base_codes: Codes = Int8Rows.zeros(0, dim or 0)
        self._codes: Codes = Int8Rows.zeros(0, dim or 0)  # the in-memory rows', in step
        self._rotation = rotation  # the codes', where they are turned
        self._rows: dict[str, int] = {}
        self._used = 0  # rows written so far, live or dropped, base included
        self._dead_base = 0  # rows of the base whose keys were dropped
        self._base = np.zeros((0, dim or 0), dtype=np.float32)
        self._spill: Path | None = None  # where the in-memory part's vectors go (``spill_to``)
        self._tail = TailRows(dim or 0)  # the in-memory part's vectors (some on the disk)
        self._token = object()

    @classmethod
    def adopt(
        cls,
        keys: Sequence[str],
        matrix: np.ndarray,
        *,
        quantized: bool = False,
        codes: Codes | None = None,
        rotation: Rotation | None = None,
        rows: np.ndarray | None = None,
    ) -> EmbeddingTable:
        """A table over ``matrix`` itself (row i is ``keys[i]``, keys unique): a start
        loads every stored vector this way, without a second copy of them. A read-only
        ``matrix`` (mapped from a file) is kept as it is, and new rows go after it.

        ``rows`` (ascending), where given, are the keys' rows of a read-only ``matrix``
        whose other rows no key names: dropped rows of the base from the start, as a
        saved snapshot's grown triples' file holds them (``kg.snapshot_file``).

        A ``quantized`` table takes ``codes`` (of ``matrix``'s rows) where a caller has
        them, else makes them: a snapshot read back codes its entities at the load, and
        making them again would cost the start as much once more (5.4-6.0 s at 2.1 million
        entities) and hold two copies while both live. Codes it makes are turned by
        ``rotation`` where given (``kg.lead_rows.fit_rotation``)."""
        dim = int(matrix.shape[1]) if len(keys) else None
        table = cls(dim, quantized=quantized, rotation=rotation)
        if len(keys):
            count = len(keys) if rows is None else len(matrix)
            if matrix.shape[0] != count or matrix.dtype != np.float32:
                raise ValueError(f"expected {count} float32 rows, got {matrix.shape}")
            if codes is not None and len(codes) != count:
                raise ValueError(f"expected codes of {count} rows, got {len(codes)}")
            if rows is not None and not _rows_of(rows, len(keys), matrix):
                raise ValueError(f"expected {len(keys)} ascending rows of a read-only matrix")
            named = range(len(keys)) if rows is None else rows.tolist()
            table._rows = dict(zip(keys, named, strict=True))
            if len(table._rows) != len(keys):
                raise ValueError("keys repeat")
            table._dead_base = count - len(keys)
            if matrix.flags.writeable:
                table._tail = TailRows.over(np.require(matrix, requirements=["C"]))
                if quantized:
                    made = codes if codes is not None else code_rows(table._tail.rows(), rotation)
                    table._codes = made
                    table._rotation = rotation_of(made)
            else:
                table._base = matrix
                if quantized:
                    table._base_codes = codes if codes is not None else code_rows(matrix, rotation)
                    table._rotation = rotation_of(table._base_codes)
            table._used = count
        return table

    def spill_to(self, folder: Path | None) -> None:
        """Write the vectors of rows added from now on to a file in ``folder`` once they
        pass ``kg.tail_rows.SPILL_BYTES`` (None: keep them in memory), where a start
        would have mapped them from the snapshot's files (``kg.tail_rows``)."""
        self._spill = folder
        self._tail.spill_to(folder)

    @property
    def quantized(self) -> bool:
        """Whether the table keeps its rows' int8 codes."""
        return self._quantized

    @property
    def rotation(self) -> Rotation | None:
        """The rotation the table's codes are turned by (None: plain, or none yet)."""
        return self._rotation

    @property
    def dim(self) -> int | None:
        """Vector size, known after the first vectors arrive."""
        return self._dim

    @property
    def matrix(self) -> RowMatrix:
        """The rows written so far (rows of dropped keys included)."""
        written = self._used - len(self._base)
        codes = (self._base_codes, self._codes.head(written)) if self._quantized else None
        return RowMatrix(self._base, self._tail.rows(), codes)

    @property
    def token(self) -> object:
        """Changes whenever row numbers change meaning (compaction, a new table)."""
        return self._token

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self) -> Iterator[str]:
        """The keys (the table's own string objects), in no particular order."""
        return iter(self._rows)

    def keys(self) -> list[str]:
        """All keys, in no particular order."""
        return list(self._rows)

    def missing(self, keys: Iterable[str]) -> list[str]:
        """The keys (deduplicated, in first-seen order) that have no vector yet."""
        return [k for k in dict.fromkeys(keys) if k not in self._rows]

    def add(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Store one vector per key in new rows (a key given again gets the last vector;
        an existing key's vector is replaced by a new row)."""
        if len(keys) == 0:
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        if self._dim is None:
            self._dim = int(vectors.shape[1])
            self._base = np.zeros((0, self._dim), dtype=np.float32)
            self._tail = TailRows(self._dim, self._spill)
            self._base_codes = Int8Rows.zeros(0, self._dim)
            self._codes = Int8Rows.zeros(0, self._dim)
        if vectors.shape != (len(keys), self._dim):
            raise ValueError(f"expected {(len(keys), self._dim)} vectors, got {vectors.shape}")
        first = self._used
        start = first - len(self._base)  # where they go in the in-memory part
        # One growth and one block write for the whole call: a start adds every stored
        # vector at once (532,000 at 323,000 triples), where a check per row cost 2.5 s.
        self._tail.append(vectors)
        grew = self._quantized and self._reserve_codes(start + len(keys))
        if self._quantized:
            if not start:
                self._turn_codes(vectors)
            self._codes.write(start, vectors)
        self._used = first + len(keys)
        if grew and start:
            self._code_again()
        if isinstance(self._codes, LeadRows):  # the order a screen reads, made here
            self._codes.prepare(self._used - len(self._base))
        if len(self._base):  # a base row replaced is a dropped one
            self._dead_base += sum(1 for k in keys if self._rows.get(k, first) < len(self._base))
        self._rows.update(zip(keys, range(first, first + len(keys)), strict=True))

    def retain(self, keep: set[str]) -> set[str]:
        """Drop every key not in ``keep``; return the dropped keys."""
        dropped = {k for k in self._rows if k not in keep}
        self.discard(dropped)
        return dropped

    def discard(self, keys: Iterable[str]) -> None:
        """Drop ``keys`` where present (their rows stay until the next compaction)."""
        split = len(self._base)
        for key in keys:
            row = self._rows.pop(key, None)
            if row is not None and row < split:
                self._dead_base += 1
        live = len(self._rows) - (split - self._dead_base)  # live rows in memory
        dead = self._used - split - live
        if dead > max(self._MIN_DEAD, self._DEAD_SHARE * live):
            self._compact()

    def rows_for(self, keys: Sequence[str]) -> np.ndarray:
        """The matrix rows of ``keys`` (all must be present), as an index array."""
        return np.fromiter((self._rows[k] for k in keys), dtype=INDEX, count=len(keys))

    def gather(self, keys: Sequence[str]) -> np.ndarray:
        """A new contiguous (len(keys), dim) array with the vectors of ``keys``."""
        if self._dim is None:
            return np.zeros((len(keys), 0), dtype=np.float32)
        return np.ascontiguousarray(self.matrix[self.rows_for(keys)])

    def _reserve_codes(self, rows: int) -> bool:
        """Grow the in-memory part's codes (by a quarter at a time) to hold at least
        ``rows`` rows; whether they grew."""
        if rows <= len(self._codes):
            return False
        size = max(rows, 64, len(self._codes) + len(self._codes) // 4)
        self._codes = self._codes.resized(size, self._used - len(self._base))
        return True

    def _code_again(self) -> None:
        """After the in-memory part grew: its codes made again where a start would make
        them otherwise (``kg.lead_rows.fit_rotation``: turned from ``lead_rows.MIN_ROWS``
        rows, with cells from ``cells.MIN_ROWS``, the cells fit again at fourfold growth),
        so that a table grown a few rows at a time links as fast as after a restart.

        Why: a service started empty and fed its documents kept plain codes until its next
        start. Measured (209,456 entities drawn like the real corpus's, the real corpus's
        questions, 2-core Xeon, 2026-12-06): a question's screen 5.49 ms p50 over a table
        grown 1,000 rows at a time, 1.83 ms over one coded as a start codes it. Checked
        only when the part grows (by a quarter), so it is coded again a few times in a
        table's life: once turned, once with cells, then at each fourfold growth. The new
        rotation is the table's (``rotation``), which the graph keeps for the next start
        (``kg.axes_file``)."""
        written = self._used - len(self._base)
        matrix = self._tail.rows()
        rotation = fit_rotation(matrix, self._rotation)
        if rotation is None or rotation is rotation_of(self._codes):
            return
        started = time.perf_counter()
        codes = write_all(LeadRows.zeros(len(self._codes), rotation), matrix)
        self._codes, self._rotation = codes, rotation
        log.info(
            "knowledge graph: %d rows' codes made again, turned%s, in %.1f s",
            written,
            f", in {rotation.cells.count} cells" if rotation.cells is not None else "",
            time.perf_counter() - started,
        )

    def _turn_codes(self, first: np.ndarray) -> None:
        """Before the in-memory part's first rows are coded: turn its codes by the table's
        rotation, fit to ``first`` where there is none and they are many enough."""
        if isinstance(self._codes, LeadRows):
            return
        if self._rotation is None:  # one the table had keeps it (and its cells) as it was
            self._rotation = fit_rotation(first)
        if self._rotation is not None:
            self._codes = LeadRows.zeros(len(self._codes), self._rotation)

    def _compact(self) -> None:
        """Move the live rows written after the base into new rows (``TailRows.compacted``;
        the old ones stay whole for whoever still reads them); the base's rows keep their
        numbers."""
        split = len(self._base)
        keys = [k for k, row in self._rows.items() if row >= split]
        moved = self.rows_for(keys) - split
        self._tail = self._tail.compacted(moved)
        capacity = max(64, len(keys) + len(keys) // 4)
        if self._quantized:
            self._codes = self._codes.take(moved, capacity)
        self._rows.update(zip(keys, range(split, split + len(keys)), strict=True))
        self._used = split + len(keys)
        self._token = object()
