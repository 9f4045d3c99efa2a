"""A snapshot's vectors as rows of an embedding table, and the entity link's candidates.

``VectorRows`` names rows of an ``EmbeddingTable``'s matrix (``kg.embeddings``) instead of
copying them, and picks the candidates of a question's link by embedding from the rows'
int8 codes (``kg.int8_rows``, ``kg.lead_rows``), scored again exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kg.best_rows import Best
from kg.embeddings import EmbeddingTable
from kg.int8_rows import Int8Rows
from kg.lead_rows import Codes
from kg.numbering import INDEX
from kg.row_matrix import RowMatrix, dot_rows

SCORE_MARGIN = 1e-5
"""How far apart two scores must be for six-decimal rounding to keep them apart, with room."""


class VectorRows:
    """Item i's vector is ``matrix[rows[i]]``: a snapshot's vectors as rows of an
    ``EmbeddingTable``'s matrix, which never rewrites a row (so no copy is needed).

    Indexing gathers (``vectors[items]`` is a new array), ``np.asarray`` gathers all.
    ``token`` is the table's when the rows were taken (``EmbeddingTable.token``).
    """

    __slots__ = ("_items", "_live", "matrix", "rows", "token")

    def __init__(
        self, matrix: RowMatrix | np.ndarray, rows: np.ndarray, token: object = None
    ) -> None:
        self.matrix = matrix if isinstance(matrix, RowMatrix) else RowMatrix(matrix[:0], matrix)
        self.rows = rows
        self.token = token
        self._items: np.ndarray | None = None  # the item of each matrix row (-1: none)
        self._live: np.ndarray | None = None  # whether each row has one (None: all have)

    def _item_index(self) -> np.ndarray | None:
        """The item of each of the matrix's rows (-1: a row no item uses, a dropped
        key's), built on first use (8 MiB at 2.1 million rows): a screen names a few
        rows, where mapping every row's estimate to the items first was a pass over all
        of them (5 ms at 2.1 million). None where items share rows (the triple texts')."""
        if self._items is None:
            index = np.full(len(self.matrix), -1, INDEX)
            index[self.rows] = np.arange(len(self.rows), dtype=INDEX)
            live = index >= 0
            distinct = np.count_nonzero(live) == len(self.rows)
            self._items = index if distinct else np.zeros(0, INDEX)
            self._live = live if distinct and len(self.rows) < len(live) else None
        return self._items if len(self._items) or not len(self.rows) else None

    def prepare(self) -> None:
        """Build what a question's first link by embedding would (the item of each row):
        a change does, before chats read its snapshot (1.5-2 ms at 209,456 entities)."""
        self._item_index()

    @classmethod
    def of(cls, table: EmbeddingTable, keys: Sequence[str]) -> VectorRows:
        """The rows of ``keys`` (all present) in ``table``."""
        return cls(table.matrix, table.rows_for(keys), table.token)

    @classmethod
    def stacked(
        cls, vectors: np.ndarray, codes: Codes | None = None, rows: np.ndarray | None = None
    ) -> VectorRows:
        """Items over a matrix of their own (a snapshot read back from disk): item i's
        row i, or ``rows[i]`` where given; with the int8 ``codes`` of every row where a
        scan reads them all."""
        empty = Int8Rows.zeros(0, int(vectors.shape[1]))
        matrix = RowMatrix(vectors[:0], vectors, None if codes is None else (empty, codes))
        return cls(matrix, np.arange(len(vectors), dtype=INDEX) if rows is None else rows)

    @property
    def shape(self) -> tuple[int, int]:
        """(items, dim), as the gathered array's."""
        return (len(self.rows), self.matrix.shape[1])

    @property
    def size(self) -> int:
        """Number of values, as the gathered array's."""
        return self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, items: Any) -> np.ndarray:
        return self.matrix[self.rows[items]]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        gathered = self.matrix[self.rows] if len(self.rows) else np.zeros(self.shape, np.float32)
        return gathered if dtype is None else gathered.astype(dtype)

    def dot(self, vector: np.ndarray) -> np.ndarray:
        """Each item's dot product with ``vector``: one pass over the matrix (dropped rows
        included, a quarter at most) instead of a gather of the items' rows first."""
        if not len(self.rows) or not self.matrix.size:
            return np.zeros(len(self.rows), np.float32)
        return self.matrix.dot(vector)[self.rows]

    def candidates(
        self, vector: np.ndarray, floor: float, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Items, ascending, and their dot products with ``vector``: every item that can
        be among the ``count`` best scoring at least ``floor`` is there, scored exactly (its
        own row, in float32). Estimates pick them (``RowMatrix.screen``): an item is
        left out only when it scores below ``floor``, or when ``count`` others surely
        score more, by more than ``SCORE_MARGIN`` (so no rounding of the scores to six
        decimals can tie them). Where the rows have cells (``kg.cells``), of the items
        in the cells nearest ``vector`` alone."""
        if not len(self.rows) or not self.matrix.size:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        index = self._item_index()
        if index is None:  # items share rows: every item's estimate
            estimates, slack = self.matrix.estimate(vector)
            estimates = estimates[self.rows]
            items = np.arange(len(self.rows))
        else:
            # Rows no item uses (dropped keys') must not set the bar (``kg.best_rows``).
            best = Best(count, SCORE_MARGIN, self._live)
            rows, estimates, slack = self.matrix.screen(vector, floor - SCORE_MARGIN, best)
            items = index[rows].astype(np.int64)
        near = (items >= 0) & (estimates >= floor - slack - SCORE_MARGIN)
        items, estimates = items[near], estimates[near]
        if items.size > count:
            kth = float(np.partition(estimates, items.size - count)[items.size - count])
            items = items[estimates >= kth - 2 * slack - SCORE_MARGIN]
        items = np.sort(items)
        return items, dot_rows(self.matrix[self.rows[items]], vector)
