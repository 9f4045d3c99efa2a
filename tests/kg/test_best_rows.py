"""Which of a screen's rows can be among the best (``kg.best_rows``): a row is left out
only where ``count`` others surely score more than it by more than the margin, so the
entities a question links are the ones a screen without it links, from fewer rows."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import kg.cells as cells
import kg.lead_rows as lead_rows
from kg import KnowledgeGraph
from kg.best_rows import FIRST, Best, can_be_best
from kg.code_parts import screen
from kg.embeddings import EmbeddingTable, normalize_rows
from kg.lead_rows import LeadRows, fit_rotation
from kg.links import most_similar
from kg.row_matrix import dot_rows
from kg.vector_rows import VectorRows
from tests.kg.kg_testdata import ROW_DIM, candidates_choice, full_scan_choice, supplied


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


def test_rows_that_cannot_be_chosen_neither_set_the_bar_nor_stay() -> None:
    """Rows not ``live`` (a table's dropped keys') are never kept, and the bar is the
    live rows' own: ten dead rows scoring above every live one leave the live best in."""
    rng = np.random.default_rng(5)
    best = Best(5, 1e-5)
    exact = rng.uniform(0.2, 0.8, size=2000).astype(np.float32)
    exact[:10] = 0.99  # dead rows, far above the live best
    live = np.ones(exact.size, bool)
    live[:10] = False
    upper, lower = exact + np.float32(0.01), exact - np.float32(0.01)
    kept = can_be_best(upper, lower.__getitem__, best, live)
    assert kept is not None and not np.isin(np.arange(10), kept).any()
    live_best = 10 + np.argsort(exact[10:])[-best.count :]
    assert set(live_best.tolist()) <= set(kept.tolist())
    without = can_be_best(upper, lower.__getitem__, best)  # the dead set the bar
    assert without is not None and not set(live_best.tolist()) <= set(without.tolist())
    few = np.zeros(exact.size, bool)
    few[[3, 50, 70]] = True  # fewer live rows than are scored first: those, all
    taken = can_be_best(upper, lower.__getitem__, best, few)
    assert taken is not None and taken.tolist() == [3, 50, 70]


@pytest.mark.parametrize("with_cells", [False, True])
def test_a_question_near_dropped_keys_links_the_live_best(
    monkeypatch: pytest.MonkeyPatch, with_cells: bool
) -> None:
    """A snapshot's items are its live keys' rows; the rows of keys dropped since the
    table was coded stay until it compacts. A question whose direction ten dropped rows
    share links the live entities a scan of the live rows alone links (it linked none, or
    others, when the dropped rows set the best rows' bar)."""
    monkeypatch.setattr(lead_rows, "MIN_ROWS", 512)
    monkeypatch.setattr(cells, "MIN_ROWS", 1024 if with_cells else 10**9)
    monkeypatch.setattr(cells, "COUNT", 8)
    monkeypatch.setattr(cells, "PROBE", 8)  # every cell: the full scan is the reference
    rng = np.random.default_rng(21)
    rows = crowded_rows(rng, 6000)
    queries = normalize_rows(rows[rng.integers(len(rows), size=20)] + 0.01)
    for n, query in enumerate(queries):
        dropped = np.arange(10) + 100 * n
        rows[dropped] = query  # each question's own dropped keys
    table = EmbeddingTable.adopt([f"e{i}" for i in range(len(rows))], rows, quantized=True)
    coded = table.matrix.codes
    assert coded is not None and isinstance(coded[1], LeadRows)
    assert (coded[1].cell is not None) == with_cells
    for n, query in enumerate(queries):
        live = np.setdiff1d(np.arange(len(rows)), np.arange(10) + 100 * n)
        vectors = VectorRows(table.matrix, live)
        expected = full_scan_choice(rows[live], query, 0.5, 5)
        assert len(expected) == 5
        assert candidates_choice(vectors, query, 0.5, 5) == expected


class TopicEmbed:
    """Names starting "near" point along ``query``, "warm" ones about 0.75 to it, the
    rest anywhere: each text's vector drawn from its own seed."""

    def __init__(self, query: np.ndarray) -> None:
        self.query = query

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for text in texts:
            rng = np.random.default_rng(zlib.crc32(text.encode()))
            noise = normalize_rows(rng.standard_normal((1, ROW_DIM)).astype(np.float32))[0]
            if text.startswith("near "):
                out.append(self.query + 0.02 * noise)
            elif text.startswith("warm "):
                out.append(0.75 * self.query + 0.66 * noise)
            else:
                out.append(noise)
        return normalize_rows(np.asarray(out, np.float32))


def test_a_removed_document_s_entities_leave_a_question_its_live_links(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """After a document whose entities a question points at is removed, the question
    links the entities a start on the same graph links: the five best of the live ones
    (the removed document's rows stay in the entities' table until it compacts)."""
    monkeypatch.setattr(lead_rows, "MIN_ROWS", 512)
    query = normalize_rows(np.random.default_rng(2).standard_normal((1, ROW_DIM)))[0]
    embed = TopicEmbed(query.astype(np.float32))
    graph = KnowledgeGraph(tmp_path / "kg", embed)
    gone = [(f"near {k}", "is like", f"near {k + 1}") for k in range(10)]
    kept = [(f"warm {k}", "relates to", f"cold {k}") for k in range(300)]
    graph.replace_documents(
        {"gone": supplied("gone", *gone), "kept": supplied("kept", *kept)},
        {"gone": "v1", "kept": "v1"},
    )

    def links(g: KnowledgeGraph) -> list[str]:
        snap = g.snapshot
        assert snap.node_vectors.matrix.rotation is not None  # turned codes, screened
        return [snap.node_keys[i] for i in most_similar(snap.node_vectors, query, 0.5, 5)]

    assert all(key.startswith("near") for key in links(graph))
    graph.remove_document("gone")
    after = links(graph)
    graph.close()
    again = KnowledgeGraph(tmp_path / "kg", embed)
    try:
        assert len(after) == 5 and all(key.startswith("warm") for key in after)
        assert links(again) == after
    finally:
        again.close()
