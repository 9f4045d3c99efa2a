"""Which of a screen's rows can be among a question's few best, so the others are not
scored further.

A question links to its five most similar entities at most (``kg.subgraph``), yet a
screen (``kg.lead_rows``) kept every row whose bound reached the link's threshold, and
copied and scored each kept row's rest codes (256 scattered bytes a row). At 2.1 million
entities that was 5,738 rows at the median question, but 27,741 on average and 101,674
at the 90th percentile: questions with many entities near them, whose screen took
30 ms and whose copy of the rest codes was the largest part of the service's time a
question.

So the rows with the highest bounds are scored in full first; ``count`` of them surely
score at least the ``count``-th of their lower bounds, and a row whose upper bound is
below that (by more than the caller's margin) cannot be among the best and is left out.
Every row that can be among them stays, with the same estimate, so the rows chosen are
the ones a screen without it chooses (``tests/kg/test_best_rows.py``).

Only rows that can be chosen set the bar (``Best.live``): a table keeps its dropped keys'
rows until it compacts (``kg.embeddings``), and where five of those scored above a
question's live best, the bar they set left the live best out, so after a document was
removed a question near its entities linked other entities (or none) than a start on the
same graph links.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

FIRST = 64
"""Rows with the highest bounds scored in full first: their lower bounds set the bar."""


@dataclass(frozen=True, eq=False)
class Best:
    """Only rows that can be among the ``count`` best are wanted: a row is left out only
    where ``count`` others surely score more than it by more than ``margin``.

    ``live``: which rows can be chosen at all (a bool for each row of the matrix screened,
    numbered as the screen numbers them); None: every row. The others are never among
    the best, and are left out."""

    count: int
    margin: float
    live: np.ndarray | None = None

    def of_part(self, start: int, rows: int) -> Best:
        """This, for the part of the matrix that holds its rows ``start, start + rows``
        (numbered from 0 there)."""
        if self.live is None:
            return self
        return Best(self.count, self.margin, self.live[start : start + rows])


def can_be_best(
    upper: np.ndarray,
    lower_of: Callable[[np.ndarray], np.ndarray],
    best: Best,
    live: np.ndarray | None = None,
) -> np.ndarray | None:
    """Positions (ascending) in ``upper``, each row's bound on its exact score, of the
    rows that can be among ``best``; None where all can (too few rows to leave any
    out). ``lower_of(positions)``: a bound below those rows' exact scores. ``live``
    (a bool for each position; None: all): the rows that can be chosen; the others
    neither set the bar nor are kept."""
    first = max(FIRST, best.count)
    if best.count <= 0:
        return None
    among = np.arange(len(upper)) if live is None else np.flatnonzero(live)
    if len(among) <= first:
        return None if live is None else among
    highest = among[np.argpartition(upper[among], len(among) - first)[-first:]]
    lower = lower_of(highest)
    bar = float(np.partition(lower, first - best.count)[first - best.count])
    kept = upper >= bar - best.margin
    return np.flatnonzero(kept if live is None else kept & live)
