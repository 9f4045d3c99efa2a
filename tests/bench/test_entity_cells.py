"""``bench.entity_cells``: both scans link from the same coded vectors, and the row says
what the cells found of what the full scan linked (all of it, where rows cluster)."""

from __future__ import annotations

import numpy as np
import pytest

import kg.cells as cells
from bench.entity_cells import measure
from kg.embeddings import normalize_rows


def test_on_clustered_vectors_the_cells_find_every_linked_entity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cells, "COUNT", 16)
    monkeypatch.setattr(cells, "PROBE", 4)
    rng = np.random.default_rng(3)
    topics = normalize_rows(rng.standard_normal((12, 384)).astype(np.float32))
    picked = rng.integers(len(topics), size=2000)
    noise = rng.standard_normal((2000, 384)).astype(np.float32) / np.sqrt(384)
    vectors = normalize_rows(topics[picked] + 0.5 * noise)
    queries = normalize_rows(topics[rng.integers(len(topics), size=30)] + 0.3 * noise[:30])
    row = measure(vectors, queries, log=lambda _: None)
    assert row.entities == 2000 and row.questions == 30
    assert row.linked_per_question > 1  # the questions link entities
    assert row.recall == 1.0 and row.same_choice == 1.0
    assert 0.1 < row.read_share < 0.6  # 4 of 16 cells, about a quarter of the rows
    assert row.every_row_ms_p50 > 0 and row.cells_ms_p50 > 0 and row.coding_cells_s > 0
