"""Int8 codes of float32 rows, and a bound on how far a score from the codes can be off.

Linking a question to entities by embedding (``kg.subgraph``) scores every entity's
vector: at 1,000,000 chunks (2.09 million entities) a float32 scan read 3.2 GB a question,
took 161 ms, and kept all of those pages in the process's RSS. The codes are a quarter of
that, and numkong's int8 dot product (SIMD, integers summed exactly) reads them 3-4x faster
(45-56 ms for 2 million rows here). The codes only pick candidates: every row whose exact
score could be among the best is scored again from its float32 row
(``VectorRows.candidates``), so the entities chosen are the exact scan's (of the rows a
question reads: all of them, or, in a large table, those of the cells nearest it:
``kg.cells``).

The bound. A row x is coded by its own scale, c = rint(x / u) with u = max|x| / 127, and
leaves a residual e = x - c u; the question q likewise (c_q, u_q, e_q). Then

    q.x = (c_q.c) u_q u + (c_q u_q).e + e_q.x

so |q.x - (c_q.c) u_q u| <= ||c_q u_q|| ||e|| + ||e_q|| ||x|| (Cauchy-Schwarz). A table
keeps the largest ||e|| and ||x|| of its rows, so one slack serves every row of a question
(0.01-0.03 for unit vectors of 384 values).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numkong
import numpy as np

from kg.file_matrix import FileMatrix, Rows, SpilledMatrix

FLOAT_SLACK = 1e-4
"""Covers float32 arithmetic: an exact score summed in float32 (384 terms, at most 2.3e-5
off for unit vectors) and the float32 products that scale an integer dot product."""

BLOCK_ROWS = 16_384
"""Rows coded at a time (24 MiB of float32 at 384 values)."""


@dataclass(frozen=True, eq=False)
class CodedQuery:
    """A float32 question's codes, its scale, and its residual and own norms: what every
    table's scores of it need, coded once. A question's link scores each half of the
    turned question against two or three tables of codes (the cells' order, a part's
    leading and rest codes, the rows after the order); it was coded five times a question
    at 100,000 chunks, 37 µs each on a 2-core AMD EPYC with AVX2, now twice."""

    codes: np.ndarray  # (dim,) int8
    unit: float
    error: float
    norm: float

    @classmethod
    def of(cls, query: np.ndarray | CodedQuery) -> CodedQuery:
        """``query`` coded (as it is where it is one)."""
        if isinstance(query, CodedQuery):
            return query
        codes, unit, error, norm = _code(np.asarray(query, np.float32)[None, :])
        codes.flags.writeable = False
        return cls(codes[0], float(unit[0]), error, norm)


Query = np.ndarray | CodedQuery
"""A question as ``Int8Rows`` scores it: float32 values, or those coded once."""


class Int8Rows:
    """Rows ``[0, len)`` of a float32 matrix as int8 codes and a scale per row.

    ``max_error`` and ``max_norm`` are the largest residual and row norms of every row
    written so far (a bound for all of them; a view of fewer rows keeps it).
    """

    __slots__ = ("codes", "max_error", "max_norm", "unit")

    def __init__(
        self, codes: np.ndarray, unit: np.ndarray, max_error: float = 0.0, max_norm: float = 0.0
    ) -> None:
        self.codes = codes
        self.unit = unit
        self.max_error = max_error
        self.max_norm = max_norm

    @classmethod
    def zeros(cls, rows: int, dim: int) -> Int8Rows:
        """Room for ``rows`` rows, none written."""
        return cls(np.zeros((rows, dim), np.int8), np.zeros(rows, np.float32))

    @classmethod
    def of(cls, matrix: Rows) -> Int8Rows:
        """The codes of every row of ``matrix``, a block at a time. A ``FileMatrix`` is
        read with file reads, not through its mapping, so that the pages read stay out of
        the process's RSS (3.2 GB at 2 million rows)."""
        return write_all(cls.zeros(*matrix.shape), matrix)

    def __len__(self) -> int:
        return len(self.codes)

    def write(self, start: int, vectors: np.ndarray) -> None:
        """Code ``vectors`` into rows ``start, start + len(vectors)``."""
        for offset in range(0, len(vectors), BLOCK_ROWS):
            block = np.asarray(vectors[offset : offset + BLOCK_ROWS], np.float32)
            codes, unit, error, norm = _code(block)
            at = start + offset
            self.codes[at : at + len(block)] = codes
            self.unit[at : at + len(block)] = unit
            self.max_error = max(self.max_error, error)
            self.max_norm = max(self.max_norm, norm)

    def head(self, rows: int) -> Int8Rows:
        """A view of the first ``rows`` rows."""
        return Int8Rows(self.codes[:rows], self.unit[:rows], self.max_error, self.max_norm)

    def resized(self, rows: int, written: int) -> Int8Rows:
        """A new one with room for ``rows`` rows and this one's first ``written``."""
        grown = Int8Rows.zeros(rows, self.codes.shape[1])
        grown.codes[:written] = self.codes[:written]
        grown.unit[:written] = self.unit[:written]
        grown.max_error, grown.max_norm = self.max_error, self.max_norm
        return grown

    def take(self, rows: np.ndarray, capacity: int) -> Int8Rows:
        """A new one with room for ``capacity`` rows, holding ``rows`` first, in order."""
        taken = Int8Rows.zeros(capacity, self.codes.shape[1])
        taken.codes[: len(rows)] = self.codes[rows]
        taken.unit[: len(rows)] = self.unit[rows]
        taken.max_error, taken.max_norm = self.max_error, self.max_norm
        return taken

    def scores(self, query: Query, rows: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """The estimated dot products with the float32 ``query`` of every row (of
        ``rows``, an index array, where given), and the slack: each exact score lies
        within it of its estimate (module docstring)."""
        codes, unit, slack = self._query(query)
        part = self if rows is None else Int8Rows(self.codes[rows], self.unit[rows])
        return _dots(part, codes, unit), slack

    def scores_in(self, query: Query, spans: Sequence[tuple[int, int]]) -> tuple[np.ndarray, float]:
        """As ``scores``, of the rows in ``spans`` ((start, stop) pairs), in order: each
        span's codes are read in place, where an index array would copy them first (a
        cell's rows, ``kg.cells``: a copy of 13 % of 2.1 million rows took longer than
        their scan)."""
        codes, unit, slack = self._query(query)
        spans = [(a, b) for a, b in spans if b > a]
        dots = np.empty((1, sum(b - a for a, b in spans)), np.float32)
        at = 0
        for a, b in spans:  # integer sums, exact in float32 (``_dots``), into their place
            numkong.cdist(
                codes[None, :], self.codes[a:b], metric="dot", out=dots[:, at : at + b - a]
            )
            at += b - a
        if spans:
            dots *= np.concatenate([self.unit[a:b] for a, b in spans])
            dots *= np.float32(unit)
        return dots[0], slack

    def slack(self, query: Query) -> float:
        """The slack of ``scores`` of the float32 ``query``, without reading any row."""
        return self._query(query)[2]

    def _query(self, query: Query) -> tuple[np.ndarray, float, float]:
        """The query's codes and unit, and the slack of its scores with these rows."""
        q = CodedQuery.of(query)
        slack = (q.norm + q.error) * self.max_error + q.error * self.max_norm + FLOAT_SLACK
        return q.codes, q.unit, slack


def gather_rows(parts: Sequence[Int8Rows], rows: np.ndarray) -> Int8Rows:
    """A new one with ``rows`` of the parts' rows (numbered in order, as a scan of the
    parts numbers them), in the order given; the parts' bounds hold for them."""
    out = Int8Rows.zeros(len(rows), parts[0].codes.shape[1])
    fill_rows([p.codes for p in parts], rows, out.codes)
    fill_rows([p.unit for p in parts], rows, out.unit)
    out.max_error = max(p.max_error for p in parts)
    out.max_norm = max(p.max_norm for p in parts)
    return out


def fill_rows(parts: Sequence[np.ndarray], rows: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = row ``rows[i]`` of the parts (numbered in order), ``BLOCK_ROWS`` rows
    at a time: ``part[rows]`` copies every row it takes before they are put in place, which
    at a stop after a start from the rows held the entities' 670 MB of rest codes twice
    (1,000,000 chunks)."""
    for first in range(0, len(rows), BLOCK_ROWS):
        block = rows[first : first + BLOCK_ROWS]
        target = out[first : first + len(block)]
        start = 0
        for part in parts:
            inside = (block >= start) & (block < start + len(part))
            target[inside] = part[block[inside] - start]
            start += len(part)


def _dots(part: Int8Rows, query_codes: np.ndarray, query_unit: float) -> np.ndarray:
    if not len(part):
        return np.zeros(0, np.float32)
    # Integer sums (at most 127 * 127 * 384 < 2**24), exact in float32.
    dots = np.asarray(
        numkong.cdist(query_codes[None, :], part.codes, metric="dot", out_dtype="float32")
    )[0]
    dots *= part.unit
    dots *= np.float32(query_unit)
    return dots


def _code(block: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Codes, unit per row, the largest residual norm and the largest row norm."""
    peak = np.abs(block).max(axis=1) if block.size else np.zeros(len(block), np.float32)
    unit = (peak / np.float32(127)).astype(np.float32)
    scaled = block / np.where(unit > 0, unit, np.float32(1))[:, None]
    codes = np.clip(np.rint(scaled, out=scaled), -127, 127).astype(np.int8)
    residual = block - codes * unit[:, None]
    error = float(np.sqrt(np.einsum("ij,ij->i", residual, residual)).max(initial=0.0))
    norm = float(np.sqrt(np.einsum("ij,ij->i", block, block)).max(initial=0.0))
    # Both norms are summed in float32, a few units in the last place off (1e-7 here):
    # rounded up by far more than that.
    return codes, unit, error + 1e-6, norm * (1 + 1e-6)


class RowWriter(Protocol):
    """Codes that rows are written into (``Int8Rows``, ``kg.lead_rows.LeadRows``)."""

    def write(self, start: int, vectors: np.ndarray) -> None: ...


Writer = TypeVar("Writer", bound=RowWriter)


def write_all(coded: Writer, matrix: Rows) -> Writer:
    """Write every row of ``matrix`` into ``coded``, a block at a time (``blocks``)."""
    start = 0
    for block in blocks(matrix):
        coded.write(start, block)
        start += len(block)
    return coded


def blocks(matrix: Rows) -> Iterator[np.ndarray]:
    """``matrix`` a block of rows at a time: from its file where it is a ``FileMatrix``
    or a ``SpilledMatrix``."""
    if isinstance(matrix, SpilledMatrix) or (isinstance(matrix, FileMatrix) and matrix.reads_file):
        yield from matrix.blocks(BLOCK_ROWS)
        return
    for start in range(0, len(matrix), BLOCK_ROWS):
        yield np.asarray(matrix[start : start + BLOCK_ROWS])
