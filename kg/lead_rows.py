"""Int8 codes of rows turned onto their principal axes, so that a scan reads a third of
most rows' codes.

A question's entity link (``kg.subgraph``) keeps only entities scoring at least its
threshold (0.5), the best five of them. The int8 scan (``kg.int8_rows``) reads all 384
codes of every entity for it: 80 MB a question at 209,456 entities (7 ms, the largest part
of a 100,000-chunk retrieval) and 806 MB at 2.1 million (70-76 ms). Yet most entities
score far below the threshold, and most of a score comes from a few directions: turned
onto the principal axes of a sample of the rows (an orthonormal rotation, which changes no
dot product), the first 128 of the model's 384 values carry 81 % of the energy of 2,939
entities of Git's documentation.

So a row is coded turned (``Rotation``): its first ``LEAD`` values and the rest apart, each
an ``Int8Rows`` with its own scales, and the norm of the rest. A scan with a floor reads
the leading codes of every row and bounds the rest by Cauchy-Schwarz,

    q.x = q_l.x_l + q_r.x_r <= est_l + slack_l + ||q_r|| ||x_r||,

and reads the rest's codes only of the rows whose bound reaches the floor. A row is
dropped only when its exact score is surely below the floor, so the candidates, and the
entities chosen, are the full scan's (``tests/kg/test_lead_rows.py``). Measured on vectors
drawn with the covariance of those real entities, against the real questions: 2.4 % of the
rows reach the rest; 7.0 → 3.1 ms at 209,456 rows and 72 → 40 ms at 2.1 million.

Vectors without principal axes (random ones) drop few rows: where more than
``DENSE_SHARE`` of the rows reach the floor the rest is read whole, in one pass, so such a
scan costs what the plain one does. A rotation is fit from at least ``MIN_ROWS`` rows; a
table coded from fewer keeps plain codes (its scan is under a millisecond).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache

import numpy as np
from threadpoolctl import ThreadpoolController

from kg.file_matrix import take_rows
from kg.int8_rows import BLOCK_ROWS, Int8Rows, gather_rows, write_all

LEAD = 128
"""Values read from every row: 81 % of the real entities' energy (a third of the bytes)."""

MIN_ROWS = 16_384
"""Rows needed to fit a rotation; fewer are coded plain."""

SAMPLE_ROWS = 4_096
"""Rows a rotation is fit from, evenly spaced."""

DENSE_SHARE = 0.25
"""Above this share of rows reaching the floor, the rest is read for every row."""

TURN_SLACK = 1e-3
"""Covers the rotation's float32 arithmetic, per unit of ||q|| ||x||: a row turned in
float32 is at most 384 units in the last place per value off (4.5e-4 in norm), the
question is turned in float64, and the float32 basis is orthonormal to about 2.4e-6."""


@dataclass(frozen=True, eq=False)
class Rotation:
    """An orthonormal basis (rows by falling variance of the rows it was fit to)."""

    basis: np.ndarray  # (dim, dim) float32

    @classmethod
    def fit(cls, matrix: np.ndarray) -> Rotation:
        """The principal axes (not centred: dot products are what is kept) of up to
        ``SAMPLE_ROWS`` evenly spaced rows of ``matrix`` (a ``FileMatrix``'s by file
        reads)."""
        step = max(1, len(matrix) // SAMPLE_ROWS)
        sample = take_rows(matrix, np.arange(0, len(matrix), step)[:SAMPLE_ROWS])
        sample = np.asarray(sample, np.float64)
        _, axes = np.linalg.eigh(sample.T @ sample)  # ascending, axes in columns
        return cls(np.ascontiguousarray(axes[:, ::-1].T, dtype=np.float32))

    def turn(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` (n, dim) on the axes, on one BLAS thread: vLLM-CPU spins on the other
        core (as the embedder runs on one thread), and OpenBLAS's second thread would
        also keep 25 MiB of work buffers for the process's life."""
        with _one_blas_thread():
            return _product(np.asarray(rows, np.float32), self.basis.T)


def _product(rows: np.ndarray, basis: np.ndarray) -> np.ndarray:
    return rows @ basis


@cache
def _blas_threads() -> ThreadpoolController:
    return ThreadpoolController()


def _one_blas_thread() -> AbstractContextManager[object]:
    return _blas_threads().limit(limits=1, user_api="blas")


class LeadRows:
    """Turned rows' codes: ``lead`` of their first ``LEAD`` values, ``rest`` of the
    others, and ``rest_norm``, each row's rest's norm (rounded up)."""

    __slots__ = ("lead", "rest", "rest_norm", "rotation")

    def __init__(
        self, rotation: Rotation, lead: Int8Rows, rest: Int8Rows, rest_norm: np.ndarray
    ) -> None:
        self.rotation = rotation
        self.lead = lead
        self.rest = rest
        self.rest_norm = rest_norm

    @classmethod
    def zeros(cls, rows: int, rotation: Rotation) -> LeadRows:
        """Room for ``rows`` rows, none written."""
        dim = len(rotation.basis)
        return cls(
            rotation,
            Int8Rows.zeros(rows, LEAD),
            Int8Rows.zeros(rows, dim - LEAD),
            np.zeros(rows, np.float32),
        )

    @classmethod
    def of(cls, matrix: np.ndarray, rotation: Rotation) -> LeadRows:
        """The codes of every row of ``matrix``, a block at a time (file reads for a
        ``FileMatrix``, as ``Int8Rows.of``)."""
        return write_all(cls.zeros(len(matrix), rotation), matrix)

    def __len__(self) -> int:
        return len(self.lead)

    def write(self, start: int, vectors: np.ndarray) -> None:
        """Code ``vectors`` into rows ``start, start + len(vectors)``, a block at a time."""
        for offset in range(0, len(vectors), BLOCK_ROWS):
            turned = self.rotation.turn(vectors[offset : offset + BLOCK_ROWS])
            rest = turned[:, LEAD:]
            at = start + offset
            self.lead.write(at, turned[:, :LEAD])
            self.rest.write(at, rest)
            norms = np.sqrt(np.einsum("ij,ij->i", rest, rest))
            self.rest_norm[at : at + len(turned)] = norms * np.float32(1 + 1e-6)

    def head(self, rows: int) -> LeadRows:
        """A view of the first ``rows`` rows."""
        return LeadRows(
            self.rotation, self.lead.head(rows), self.rest.head(rows), self.rest_norm[:rows]
        )

    def resized(self, rows: int, written: int) -> LeadRows:
        """A new one with room for ``rows`` rows and this one's first ``written``."""
        norms = np.zeros(rows, np.float32)
        norms[:written] = self.rest_norm[:written]
        return LeadRows(
            self.rotation,
            self.lead.resized(rows, written),
            self.rest.resized(rows, written),
            norms,
        )

    def take(self, rows: np.ndarray, capacity: int) -> LeadRows:
        """A new one with room for ``capacity`` rows, holding ``rows`` first, in order."""
        norms = np.zeros(capacity, np.float32)
        norms[: len(rows)] = self.rest_norm[rows]
        return LeadRows(
            self.rotation, self.lead.take(rows, capacity), self.rest.take(rows, capacity), norms
        )

    def scores(self, query: np.ndarray) -> tuple[np.ndarray, float]:
        """Every row's estimated dot product with ``query`` and the slack, as
        ``Int8Rows.scores``."""
        turned, lead, lead_slack = self._lead(query)
        rest, rest_slack = self.rest.scores(turned[LEAD:])
        return lead + rest, lead_slack + rest_slack

    def screen(self, query: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray, float]:
        """The rows whose exact score with ``query`` can reach ``floor`` (ascending),
        their estimates, and the slack (module docstring)."""
        turned, lead, lead_slack = self._lead(query)
        rest_query = turned[LEAD:]
        reach = float(np.linalg.norm(rest_query)) * (1 + 1e-6)
        bound = np.multiply(self.rest_norm, np.float32(reach))
        bound += lead
        kept = np.flatnonzero(bound >= floor - lead_slack)
        if kept.size > DENSE_SHARE * len(self):
            rest, rest_slack = self.rest.scores(rest_query)
            return kept, lead[kept] + rest[kept], lead_slack + rest_slack
        rest, rest_slack = self.rest.scores(rest_query, kept)
        return kept, lead[kept] + rest, lead_slack + rest_slack

    def _lead(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """The question turned, every row's estimate over the leading values, and its
        slack (with the rotation's: ``TURN_SLACK``)."""
        query = np.asarray(query, np.float64)
        turned = (self.rotation.basis.astype(np.float64) @ query).astype(np.float32)
        lead, lead_slack = self.lead.scores(turned[:LEAD])
        row_norm = self.lead.max_norm + self.rest.max_norm
        return turned, lead, lead_slack + TURN_SLACK * float(np.linalg.norm(query)) * row_norm


Codes = Int8Rows | LeadRows
"""A part of a table's codes, plain or turned."""


def fit_rotation(matrix: np.ndarray) -> Rotation | None:
    """A rotation fit to ``matrix``'s rows where they are ``MIN_ROWS`` or more and wide
    enough to keep ``LEAD`` values apart; None (code them plain) otherwise."""
    if len(matrix) < MIN_ROWS or matrix.ndim != 2 or matrix.shape[1] <= 2 * LEAD:
        return None
    return Rotation.fit(matrix)


def code_rows(matrix: np.ndarray, rotation: Rotation | None = None) -> Codes:
    """The codes of ``matrix``'s rows: turned by ``rotation``, else by one fit to them
    (``fit_rotation``), else plain."""
    rotation = rotation or fit_rotation(matrix)
    return Int8Rows.of(matrix) if rotation is None else LeadRows.of(matrix, rotation)


def rotation_of(codes: Codes | None) -> Rotation | None:
    """The rotation ``codes`` are turned by (None: plain)."""
    return codes.rotation if isinstance(codes, LeadRows) else None


def estimate(parts: Sequence[Codes], query: np.ndarray) -> tuple[np.ndarray, float]:
    """Every row's estimated dot product with the float32 ``query`` (the parts' rows in
    order), and the slack: each exact score lies within it of its estimate."""
    scored = [part.scores(query) for part in parts]
    scores = [s for s, _ in scored]
    slack = max((s for _, s in scored), default=0.0)
    return np.concatenate(scores) if scores else np.zeros(0, np.float32), slack


def screen(
    parts: Sequence[Codes], query: np.ndarray, floor: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """The rows (numbered as ``estimate`` numbers them, ascending) whose exact score with
    ``query`` can reach ``floor``, their estimates, and the slack. Turned parts drop most
    rows after their leading codes; plain ones estimate every row."""
    found, estimates, slacks, start = [], [], [0.0], 0
    for part in parts:
        if isinstance(part, LeadRows):
            rows, scores, slack = part.screen(query, floor)
        else:
            every, slack = part.scores(query)
            rows = np.flatnonzero(every >= floor - slack)
            scores = every[rows]
        found.append(rows + start)
        estimates.append(scores)
        slacks.append(slack)
        start += len(part)
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), 0.0
    return np.concatenate(found), np.concatenate(estimates), max(slacks)


def gather(parts: Sequence[Codes], rows: np.ndarray) -> Codes | None:
    """A new one with ``rows`` of the parts' rows (numbered in order, as ``estimate``
    numbers them), in the order given; the parts' bounds hold for them. None where the
    parts holding rows are coded differently (plain and turned, or turned two ways)."""
    plain = [p for p in parts if isinstance(p, Int8Rows)]
    held = [p for p in parts if len(p)]
    if all(isinstance(p, Int8Rows) for p in held):
        # Parts without rows add none, whatever their kind: number the plain ones alone.
        return gather_rows(plain, rows) if plain else None
    turned = [p for p in held if isinstance(p, LeadRows)]
    if len(turned) != len(held) or any(p.rotation is not turned[0].rotation for p in turned):
        return None
    norms = np.concatenate([p.rest_norm for p in turned])
    return LeadRows(
        turned[0].rotation,
        gather_rows([p.lead for p in turned], rows),
        gather_rows([p.rest for p in turned], rows),
        norms[rows],
    )
