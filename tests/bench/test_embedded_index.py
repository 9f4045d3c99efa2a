"""The embedded-store benchmark measures what it says, on a size small enough for CI."""

from pathlib import Path

import numpy as np
import pytest

from bench.embedded_index import BATCH, dataset, exact_top_k, iter_table, run_embedded_index
from bench.index_stores import STORES, reopen, visible


def test_exact_search_honours_the_filter() -> None:
    vectors, queries = dataset(3000, 5)
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1)
    mask = visible(3000)
    assert 0 < (~mask).sum() < 100  # pending and document-less points exist
    for top in exact_top_k(vectors, queries, mask):
        assert len(top) == 10 and all(mask[i] for i in top)


@pytest.mark.parametrize("name", sorted(STORES))
def test_a_reopened_store_holds_the_same_points_and_answers_alike(
    name: str, tmp_path: Path
) -> None:
    """What the benchmark's reopen times is a restart of the same data: the folder opened
    again finds every point and answers the first query as the store did before closing."""
    vectors, queries = dataset(600, 3)
    store = STORES[name](tmp_path / name, True)
    for start in range(0, len(vectors), BATCH):
        store.insert(vectors[start : start + BATCH], start)
    store.finish()
    before = store.search(queries[0], False)
    store.close()
    again = reopen(name, tmp_path / name, queries[0])
    assert again.points == 600
    assert again.first_hits == before and len(before) == 10
    assert again.seconds > 0 and again.first_query_ms > 0


def test_small_run_has_sane_rows(tmp_path: Path) -> None:
    messages: list[str] = []
    result = run_embedded_index([300], tmp_path, messages.append, queries=8)
    rows = {row.store: row for row in result.rows}
    assert set(rows) == {"local", "edge"} and len(messages) == 2
    assert rows["local"].recall_at_10 == 1.0  # local mode is exact
    assert (rows["edge"].recall_at_10 or 0) >= 0.9
    assert rows["edge"].indexed_vectors is not None and rows["local"].indexed_vectors is None
    for row in rows.values():
        assert row.size == 300 and not row.extrapolated
        assert (row.insert_per_s or 0) > 0 and (row.first_query_ms or 0) > 0
        assert 0 < row.p50_ms <= row.p99_ms
        assert row.filtered_queries == row.nofilter_queries == 8
    assert len(list(iter_table(result))) == 3
    assert list(tmp_path.iterdir()) == []  # each store's folder is removed
