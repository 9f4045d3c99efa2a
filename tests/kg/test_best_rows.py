"""Which of a screen's rows can be among the best (``kg.best_rows``): a row is left out
only where ``count`` others surely score more than it by more than the margin, so the
entities a question links are the ones a screen without it links, from fewer rows."""

from __future__ import annotations

import numpy as np
import pytest

import kg.cells as cells
import kg.lead_rows as lead_rows
from kg.best_rows import FIRST, Best, can_be_best
from kg.code_parts import screen
from kg.embeddings import normalize_rows
from kg.lead_rows import LeadRows, fit_rotation
from kg.row_matrix import dot_rows
from tests.kg.kg_testdata import ROW_DIM, full_scan_choice


def test_a_row_is_left_out_only_where_count_others_surely_score_more() -> None:
    rng = np.random.default_rng(3)
    best = Best(5, 1e-5)
    left_out = 0
    for _ in range(50):
        exact = rng.uniform(0.2, 0.9, size=2000).astype(np.float32)
        upper = exact + rng.uniform(0.0, 0.2, size=exact.size).astype(np.float32)
        lower = exact - rng.uniform(0.0, 0.02, size=exact.size).astype(np.float32)
        kept = can_be_best(upper, lower.__getitem__, best)
        assert kept is not None and np.all(np.diff(kept) > 0)
        dropped = np.setdiff1d(np.arange(exact.size), kept)
        surely = np.sort(exact)[-best.count]  # the count best score at least this
        assert np.all(exact[dropped] < surely - best.margin)
        assert set(np.argsort(exact)[-best.count :].tolist()) <= set(kept.tolist())
        left_out += dropped.size
    assert left_out > 50 * 1000  # most of the rows cannot be among five of 2,000


def test_with_few_rows_or_none_wanted_every_row_stays() -> None:
    upper = np.linspace(0.0, 1.0, FIRST, dtype=np.float32)
    assert can_be_best(upper, lambda at: upper[at], Best(5, 0.0)) is None
    more = np.linspace(0.0, 1.0, 4 * FIRST, dtype=np.float32)
    assert can_be_best(more, lambda at: more[at], Best(0, 0.0)) is None


def crowded_rows(rng: np.random.Generator, count: int) -> np.ndarray:
    """Unit rows crowded around a few directions, as the entities of a topic many
    documents name: a question near one has thousands of rows above the threshold."""
    centres = normalize_rows(rng.standard_normal((6, ROW_DIM)).astype(np.float32))
    spread = (np.arange(ROW_DIM) + 8.0).astype(np.float32) ** -1.0
    noise = normalize_rows(rng.standard_normal((count, ROW_DIM)).astype(np.float32) * spread)
    return normalize_rows(centres[rng.integers(len(centres), size=count)] + noise)


@pytest.mark.parametrize("with_cells", [False, True])
def test_a_screen_for_the_best_keeps_fewer_rows_and_links_the_same(
    monkeypatch: pytest.MonkeyPatch, with_cells: bool
) -> None:
    """Over the rows it keeps the estimates are the plain screen's; the five linked
    from them are the full scan's; and crowded questions keep far fewer rows."""
    monkeypatch.setattr(lead_rows, "MIN_ROWS", 512)
    monkeypatch.setattr(cells, "MIN_ROWS", 1024 if with_cells else 10**9)
    monkeypatch.setattr(cells, "COUNT", 8)
    monkeypatch.setattr(cells, "PROBE", 4)
    rng = np.random.default_rng(21)
    rows = crowded_rows(rng, 6000)
    rotation = fit_rotation(rows)
    assert rotation is not None and (rotation.cells is not None) == with_cells
    coded = LeadRows.of(rows, rotation)
    best = Best(5, 1e-5)
    plain_kept = best_kept = 0
    for query in normalize_rows(rows[rng.integers(len(rows), size=30)] + 0.01):
        every, estimates, _ = screen([coded], query, 0.5)
        kept, best_estimates, _ = screen([coded], query, 0.5, best)
        assert np.all(np.diff(kept) > 0) and set(kept.tolist()) <= set(every.tolist())
        np.testing.assert_array_equal(best_estimates, estimates[np.isin(every, kept)])
        exact = dot_rows(rows[kept], query)
        above = np.flatnonzero(exact >= 0.5)
        chosen = above[np.lexsort((kept[above], -np.round(exact[above], 6)))][:5]
        if not with_cells:  # with cells, of the rows in the cells read alone
            assert kept[chosen].tolist() == full_scan_choice(rows, query, 0.5, 5)
        plain_kept += every.size
        best_kept += kept.size
    assert best_kept < plain_kept / 3
