"""Cells: a large entity table's rows grouped by the nearest of a few hundred centres, so
that a question's link by embedding reads the rows of the cells nearest it, not all.

Turned codes (``kg.lead_rows``) still read the leading codes of every row: at 209,456
entities (100,000 chunks) 3.8 ms a question, at 2.1 million 37 ms, about 15 ns a row
whatever the codes' width, so only reading fewer rows takes more off. An inverted file
does: the rows' leading turned values are clustered (k-means, ``COUNT`` centres, fit once
to a sample), each row filed under its nearest centre, and a question reads the rows of
the ``PROBE`` cells whose centres score highest with it, each cell's codes one slice
(``CellOrder``). Within those rows the screen is exact, as before; a row in another cell
is not seen. Measured on entity vectors drawn like the real corpus's against its
questions (``bench.entity_vectors``; a Gaussian, less clustered than real entities, so
the harder case): 13.3 % of the rows read, and 97.9 % of the entities the full scan
links found at 209,456 rows (1.2 ms a question), 99.4 % at 2.1 million (7.6 ms;
``bench.entity_cells``).

A table gets cells once it is coded from ``MIN_ROWS`` rows or more. Which cells a
question reads depends on the question and the centres alone, and a row's cell on its
vector and the centres alone, so rows added later are filed where a later start files
them, and an answer changes only where a row enters or leaves a cell it reads: what the
warm registry's change rule already tests for every new fact. The centres are kept in
the graph's folder with the rotation (``kg.axes_file``), so that a restart reads the
same cells; they are fit again only once the table has grown ``REFIT_GROWTH`` times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kg.int8_rows import Int8Rows, Query

MIN_ROWS = 100_000
"""Rows a table is coded from before it is given cells (their full scan: about 1.8 ms)."""

COUNT = 512
"""Centres: filing a row costs ``COUNT`` x 128 products (a start coding 2.1 million rows
takes 5.8 s more with cells, the fit and the cell order included)."""

PROBE = 64
"""Cells a question reads: an eighth of them."""

SAMPLE_PER_CELL = 32
"""Rows of the fitting sample per centre (16,384 evenly spaced rows)."""

ROUNDS = 10
"""Rounds of Lloyd's k-means."""

REFIT_GROWTH = 4
"""A start fits the centres again once the table has this many times the rows they were
fit to (their cells grown fourfold; a question would read four times the rows)."""


def due(cells: Cells | None, rows: int) -> bool:
    """Whether a table coded from ``rows`` rows needs (new) centres."""
    return rows >= MIN_ROWS and (cells is None or rows >= REFIT_GROWTH * cells.fitted_rows)


def sample_rows(rows: int) -> np.ndarray:
    """The rows a fit reads: evenly spaced, so a fit is the same for the same table."""
    step = max(1, rows // (COUNT * SAMPLE_PER_CELL))
    return np.arange(0, rows, step)[: COUNT * SAMPLE_PER_CELL]


@dataclass(frozen=True, eq=False)
class Cells:
    """Centres on a rotation's leading axes, and the table size they were fit to."""

    centres: np.ndarray  # (cells, lead) float32
    fitted_rows: int

    @classmethod
    def fit(cls, lead: np.ndarray, rows: int) -> Cells:
        """Centres for ``lead``, a sample's leading turned values, by k-means from evenly
        spaced rows of it (deterministic: the same sample gives the same centres).
        ``rows``: the table's size (``REFIT_GROWTH``)."""
        lead = np.asarray(lead, np.float32)
        count = min(COUNT, len(lead))
        centres = lead[np.linspace(0, len(lead) - 1, count).astype(np.int64)].copy()
        for _ in range(ROUNDS):
            cell = _nearest(lead, centres)
            order = np.argsort(cell, kind="stable")
            sizes = np.bincount(cell, minlength=count)
            filled = sizes > 0  # an empty cell keeps its centre
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])[filled]
            sums = np.add.reduceat(lead[order], starts, axis=0)
            centres[filled] = sums / sizes[filled, None]
        return cls(centres, rows)

    @property
    def count(self) -> int:
        return len(self.centres)

    def assign(self, lead: np.ndarray) -> np.ndarray:
        """Each row's cell (int16): the centre nearest its leading turned values."""
        return _nearest(np.asarray(lead, np.float32), self.centres).astype(np.int16)

    def near(self, lead_query: np.ndarray) -> np.ndarray:
        """The cells a question reads (ascending): the ``PROBE`` whose centres score
        highest with its leading turned values."""
        scores = self.centres @ np.asarray(lead_query, np.float32)
        if len(scores) <= PROBE:
            return np.arange(len(scores))
        return np.sort(np.argpartition(-scores, PROBE)[:PROBE])


def _nearest(lead: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The nearest centre of each row (least squared distance; the first of a tie).

    Scored in float64, so that a row's cell does not depend on the rows assigned with
    it (``Rotation.turn`` says why): in float32, 1 of a graph's 1,400 entities took
    another cell when its rows were coded again (2-core AMD EPYC with AVX2,
    2026-12-07). 1.17 s against 0.50 s for 209,456 rows and 512 cells there."""
    centres64 = np.asarray(centres, np.float64)
    scores = np.asarray(lead, np.float64) @ centres64.T
    scores -= 0.5 * np.einsum("ij,ij->i", centres64, centres64)
    return np.argmax(scores, axis=1)


class CellOrder:
    """A part's rows in cell order (each cell's ascending), with their leading codes and
    rest norms copied in that order, so that a question reads each cell's codes as one
    slice (a copy of a tenth of 2.1 million scattered rows took longer than their scan).
    A fifth more of the codes' memory; made on a part's first screen, or by the change
    that wrote its rows (``LeadRows.prepare``), and shared with the part's later views,
    which read the rows written after it in place until they are many
    (``kg.lead_rows.ORDER_TAIL_SHARE``)."""

    __slots__ = ("lead", "rest_norm", "rows", "starts")

    def __init__(self, cell: np.ndarray, count: int, lead: Int8Rows, rest_norm: np.ndarray):
        self.rows = np.argsort(cell, kind="stable").astype(np.int64)
        self.starts = np.zeros(count + 1, np.int64)
        np.cumsum(np.bincount(cell, minlength=count), out=self.starts[1:])
        self.lead = Int8Rows(
            lead.codes[self.rows], lead.unit[self.rows], lead.max_error, lead.max_norm
        )
        self.rest_norm = rest_norm[self.rows]

    def __len__(self) -> int:
        """The rows it orders: its part's first ones."""
        return len(self.rows)

    def read(
        self, cells: np.ndarray, lead_query: Query, reach: float, floor: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows of ``cells`` whose bound reaches ``floor`` (in this order), their
        estimates over the leading codes (``Int8Rows.scores_in``; the caller has their
        slack from ``Int8Rows.slack``) and their bounds. A row's bound is its estimate
        plus its rest's norm times ``reach``. Only the rows kept are looked up: at 2.1
        million rows a question reads 280,000, and gathering every one's row number and
        norm first took 1-2 ms of a 9 ms screen."""
        spans = [(int(self.starts[c]), int(self.starts[c + 1])) for c in cells.tolist()]
        spans = [(a, b) for a, b in spans if b > a]
        if not spans:
            empty = np.zeros(0, np.float32)
            return np.zeros(0, np.int64), empty, empty
        lead, _ = self.lead.scores_in(lead_query, spans)
        bound = np.concatenate([self.rest_norm[a:b] for a, b in spans])
        bound *= np.float32(reach)
        bound += lead
        kept = np.flatnonzero(bound >= floor)
        # Each kept row's place in the order: its span's start plus its offset in it.
        starts = np.array([a for a, _ in spans], np.int64)
        offsets = np.cumsum([0, *(b - a for a, b in spans)])
        span = np.searchsorted(offsets, kept, side="right") - 1
        return self.rows[starts[span] + kept - offsets[span]], lead[kept], bound[kept]
