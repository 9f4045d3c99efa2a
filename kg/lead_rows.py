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
entities chosen, are the full scan's of the rows read (``tests/kg/test_lead_rows.py``).
Measured on vectors drawn with the covariance of those real entities, against the real
questions: 2.4 % of the rows reach the rest; 7.0 → 3.1 ms at 209,456 rows and 72 → 40 ms
at 2.1 million.

Vectors without principal axes (random ones) drop few rows: where more than
``DENSE_SHARE`` of the rows reach the floor the rest is read whole, in one pass, so such a
scan costs what the plain one does. A rotation is fit from at least ``MIN_ROWS`` rows; a
table coded from fewer keeps plain codes (its scan is under a millisecond).

A rotation fit to a large table also has cells on its leading axes (``kg.cells``): each
row is filed under one as it is coded, and a screen reads only the rows of the cells
nearest the question.
"""

from __future__ import annotations

import numpy as np

from kg import cells as cell_fit
from kg.best_rows import Best, can_be_best
from kg.cells import CellOrder
from kg.file_matrix import Rows
from kg.int8_rows import BLOCK_ROWS, CodedQuery, Int8Rows, write_all
from kg.rotation import LEAD, Rotation, one_blas_thread

MIN_ROWS = 16_384
"""Rows needed to fit a rotation; fewer are coded plain."""

DENSE_SHARE = 0.25
"""Above this share of rows reaching the floor, the rest is read for every row."""

ORDER_TAIL_SHARE = 1 / 16
ORDER_TAIL_MIN = 4_096
"""Rows written after a part's cell order (``CellOrder``) that a screen reads beside it,
in place, before the order is made again over all of them: the larger of this share of
the rows and this many (at 15 ns a row, 0.2 ms at 209,456 rows)."""

TURN_SLACK = 1e-3
"""Covers the rotation's float32 arithmetic, per unit of ||q|| ||x||: a row turned in
float32 is at most 384 units in the last place per value off (4.5e-4 in norm), the
question is turned in float64, and the float32 basis is orthonormal to about 2.4e-6."""


class LeadRows:
    """Turned rows' codes: ``lead`` of their first ``LEAD`` values, ``rest`` of the
    others, and ``rest_norm``, each row's rest's norm (rounded up); with the rotation's
    cells, ``cell``, each row's."""

    __slots__ = ("_by_cell", "_shared", "cell", "lead", "rest", "rest_norm", "rotation", "saved_as")

    def __init__(
        self,
        rotation: Rotation,
        lead: Int8Rows,
        rest: Int8Rows,
        rest_norm: np.ndarray,
        cell: np.ndarray | None = None,
    ) -> None:
        self.rotation = rotation
        self.lead = lead
        self.rest = rest
        self.rest_norm = rest_norm
        self.cell = cell if rotation.cells is not None else None
        if rotation.cells is not None and (cell is None or len(cell) != len(lead)):
            raise ValueError("rows turned by a rotation with cells need a cell each")
        self._by_cell: CellOrder | None = None  # this one's (``_cell_order``)
        #: The saved snapshot whose code files hold these rows' codes as they are (a start
        #: read them back): a stop grows those files rather than write them again
        #: (``kg.saved_codes``). Set by the reader alone; rows are never written again.
        self.saved_as: str | None = None
        self._shared = _SharedOrder()  # this one's and its views' (``head``)

    @classmethod
    def zeros(cls, rows: int, rotation: Rotation) -> LeadRows:
        """Room for ``rows`` rows, none written."""
        return cls(
            rotation,
            Int8Rows.zeros(rows, LEAD),
            Int8Rows.zeros(rows, rotation.dim - LEAD),
            np.zeros(rows, np.float32),
            np.zeros(rows, np.int16) if rotation.cells is not None else None,
        )

    @classmethod
    def of(cls, matrix: Rows, rotation: Rotation) -> LeadRows:
        """The codes of every row of ``matrix``, a block at a time (file reads for a
        ``FileMatrix``, as ``Int8Rows.of``); with cells, laid out in cell order here (a
        start's), not by the first question (0.3 s at 2.1 million rows)."""
        coded = write_all(cls.zeros(len(matrix), rotation), matrix)
        coded._cell_order()
        return coded

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
            if self.cell is not None and self.rotation.cells is not None:
                with one_blas_thread():
                    self.cell[at : at + len(turned)] = self.rotation.cells.assign(turned[:, :LEAD])

    def head(self, rows: int) -> LeadRows:
        """A view of the first ``rows`` rows; it shares this one's cell order (rows once
        written are not written again, so an order of the first rows holds for every
        view that has them)."""
        view = LeadRows(
            self.rotation,
            self.lead.head(rows),
            self.rest.head(rows),
            self.rest_norm[:rows],
            None if self.cell is None else self.cell[:rows],
        )
        view._shared = self._shared
        return view

    def prepare(self, rows: int) -> None:
        """Make the cell order of the first ``rows`` rows now where a screen of them
        would (``_cell_order``): a change does, so that the first question after it does
        not (20-28 ms at 209,456 rows, 0.3 s at 2.1 million)."""
        self.head(rows)._cell_order()

    def resized(self, rows: int, written: int) -> LeadRows:
        """A new one with room for ``rows`` rows and this one's first ``written``."""
        norms = np.zeros(rows, np.float32)
        norms[:written] = self.rest_norm[:written]
        return LeadRows(
            self.rotation,
            self.lead.resized(rows, written),
            self.rest.resized(rows, written),
            norms,
            _cells_kept(self.cell, np.arange(written), rows),
        )

    def take(self, rows: np.ndarray, capacity: int) -> LeadRows:
        """A new one with room for ``capacity`` rows, holding ``rows`` first, in order."""
        norms = np.zeros(capacity, np.float32)
        norms[: len(rows)] = self.rest_norm[rows]
        return LeadRows(
            self.rotation,
            self.lead.take(rows, capacity),
            self.rest.take(rows, capacity),
            norms,
            _cells_kept(self.cell, rows, capacity),
        )

    def scores(self, query: np.ndarray) -> tuple[np.ndarray, float]:
        """Every row's estimated dot product with ``query`` and the slack, as
        ``Int8Rows.scores``."""
        turned, lead, lead_slack = self._lead(query)
        rest, rest_slack = self.rest.scores(turned[LEAD:])
        return lead + rest, lead_slack + rest_slack

    def screen(
        self, query: np.ndarray, floor: float, best: Best | None = None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The rows whose exact score with ``query`` can reach ``floor`` (ascending),
        their estimates, and the slack (module docstring); with ``best``, of those the
        ones that can be among the best (``kg.best_rows``); with cells, of the rows in
        the cells nearest ``query`` alone (``kg.cells``)."""
        if self.cell is not None:
            return self._screen_cells(query, floor, best)
        turned, lead, lead_slack = self._lead(query)
        bound = np.multiply(self.rest_norm, np.float32(_reach(turned[LEAD:])))
        bound += lead
        kept = np.flatnonzero(bound >= floor - lead_slack)
        rest_query = CodedQuery.of(turned[LEAD:])
        if best is not None:
            kept = kept[self._best(kept, lead[kept], bound[kept], lead_slack, rest_query, best)]
        if kept.size > DENSE_SHARE * len(self):
            rest, rest_slack = self.rest.scores(rest_query)
            return kept, lead[kept] + rest[kept], lead_slack + rest_slack
        rest, rest_slack = self.rest.scores(rest_query, kept)
        return kept, lead[kept] + rest, lead_slack + rest_slack

    def _screen_cells(
        self, query: np.ndarray, floor: float, best: Best | None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """``screen`` over the rows of the cells nearest ``query`` (``kg.cells``)."""
        cells = self.rotation.cells
        order = self._cell_order()
        assert cells is not None and order is not None
        turned = self.rotation.turn_query(query)
        near = cells.near(turned[:LEAD])
        reach = _reach(turned[LEAD:])
        lead_query, rest_query = CodedQuery.of(turned[:LEAD]), CodedQuery.of(turned[LEAD:])
        settled = len(order)
        # The slack is known before any row is read: each part's bound from its codes'.
        lead_slack = order.lead.slack(lead_query)
        if settled < len(self):
            lead_slack = max(lead_slack, self.lead.slack(lead_query))
        lead_slack += self._turn_slack(query)
        rows, lead, bound = order.read(near, lead_query, reach, floor - lead_slack)
        if settled < len(self):  # rows written after the order: theirs read in place
            assert self.cell is not None
            tail = settled + np.flatnonzero(np.isin(self.cell[settled:], near))
            tail_lead, _ = self.lead.scores(lead_query, tail)
            tail_bound = np.multiply(self.rest_norm[tail], np.float32(reach))
            tail_bound += tail_lead
            kept = np.flatnonzero(tail_bound >= floor - lead_slack)
            rows = np.concatenate([rows, tail[kept]])
            lead = np.concatenate([lead, tail_lead[kept]])
            bound = np.concatenate([bound, tail_bound[kept]])
        if best is not None:
            chosen = self._best(rows, lead, bound, lead_slack, rest_query, best)
            rows, lead = rows[chosen], lead[chosen]
        ascending = np.argsort(rows)
        rows, lead = rows[ascending], lead[ascending]
        rest, rest_slack = self.rest.scores(rest_query, rows)
        return rows, lead + rest, lead_slack + rest_slack

    def _best(
        self,
        rows: np.ndarray,
        lead: np.ndarray,
        bound: np.ndarray,
        lead_slack: float,
        rest_query: CodedQuery,
        best: Best,
    ) -> np.ndarray | slice:
        """Where in ``rows`` (with their leading estimates and bounds) the rows that can
        be among ``best`` are (``kg.best_rows``): a row's exact score is at most its bound
        plus ``lead_slack``, and at least its full estimate less both slacks."""
        slack = lead_slack + self.rest.slack(rest_query)

        def lower_of(at: np.ndarray) -> np.ndarray:
            rest, _ = self.rest.scores(rest_query, rows[at])
            return lead[at] + rest - np.float32(slack)

        live = None if best.live is None else best.live[rows]
        chosen = can_be_best(bound + np.float32(lead_slack), lower_of, best, live)
        return slice(None) if chosen is None else chosen

    def _cell_order(self) -> CellOrder | None:
        """The cell order (``kg.cells.CellOrder``) of this part's first rows, all of them
        but at most ``ORDER_TAIL_*`` (a screen reads those in place): this one's, else the
        one it shares with the part it is a view of, else made over all its rows and
        shared, so a table's next views (one a change) start from it. Without cells,
        None."""
        if self.cell is None or self.rotation.cells is None:
            return None
        if self._by_cell is not None:
            return self._by_cell
        shared = self._shared.order
        tail = max(ORDER_TAIL_MIN, int(ORDER_TAIL_SHARE * len(self)))
        if shared is not None and len(shared) <= len(self) and len(self) - len(shared) <= tail:
            self._by_cell = shared
            return shared
        order = CellOrder(self.cell, self.rotation.cells.count, self.lead, self.rest_norm)
        if shared is None or len(shared) < len(order):
            self._shared.order = order
        self._by_cell = order
        return order

    def _turn_slack(self, query: np.ndarray) -> float:
        """What the rotation's float32 arithmetic adds to the slack (``TURN_SLACK``)."""
        row_norm = self.lead.max_norm + self.rest.max_norm
        return TURN_SLACK * float(np.linalg.norm(query)) * row_norm

    def _lead(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """The question turned, every row's estimate over the leading values, and its
        slack (with the rotation's: ``TURN_SLACK``)."""
        turned = self.rotation.turn_query(query)
        lead, lead_slack = self.lead.scores(turned[:LEAD])
        return turned, lead, lead_slack + self._turn_slack(query)


class _SharedOrder:
    """A part's cell order, held where the part and its views (``LeadRows.head``) all
    find it."""

    __slots__ = ("order",)

    def __init__(self) -> None:
        self.order: CellOrder | None = None


def _reach(rest_query: np.ndarray) -> float:
    """The norm of the question's rest, rounded up: what Cauchy-Schwarz multiplies a
    row's rest's norm by."""
    return float(np.linalg.norm(rest_query)) * (1 + 1e-6)


def _cells_kept(cell: np.ndarray | None, rows: np.ndarray, capacity: int) -> np.ndarray | None:
    """The cells of ``rows`` first, in room for ``capacity`` rows (None without cells)."""
    if cell is None:
        return None
    kept = np.zeros(capacity, np.int16)
    kept[: len(rows)] = cell[rows]
    return kept


Codes = Int8Rows | LeadRows
"""A part of a table's codes, plain or turned."""


def fit_rotation(matrix: Rows, saved: Rotation | None = None) -> Rotation | None:
    """The rotation to code ``matrix``'s rows by: ``saved`` (the table's so far) where it
    fits their width, else one fit to them where they are ``MIN_ROWS`` or more and wide
    enough to keep ``LEAD`` values apart; None (code them plain) otherwise. Its cells are
    fit (again) where the rows call for them (``kg.cells.due``)."""
    if matrix.ndim != 2 or matrix.shape[1] <= 2 * LEAD:
        return None
    rotation = saved if saved is not None and saved.dim == matrix.shape[1] else None
    if rotation is None and len(matrix) >= MIN_ROWS:
        rotation = Rotation.fit(matrix)
    if rotation is not None and cell_fit.due(rotation.cells, len(matrix)):
        rotation = rotation.with_cells(matrix)
    return rotation


def code_rows(matrix: Rows, saved: Rotation | None = None) -> Codes:
    """The codes of ``matrix``'s rows: turned by ``fit_rotation``'s rotation, else
    plain."""
    rotation = fit_rotation(matrix, saved)
    return Int8Rows.of(matrix) if rotation is None else LeadRows.of(matrix, rotation)


def rotation_of(codes: Codes | None) -> Rotation | None:
    """The rotation ``codes`` are turned by (None: plain)."""
    return codes.rotation if isinstance(codes, LeadRows) else None
