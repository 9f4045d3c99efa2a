"""``bench.entity_vectors``: vectors drawn with a fitted shape have its mean and spread
(so the scale section's graph has principal axes and links), the same for the same seed."""

from __future__ import annotations

import numpy as np
import pytest

from bench import entity_vectors
from bench.entity_vectors import ShapedEmbedder, VectorShape
from kg.embeddings import normalize_rows
from kg.rotation import LEAD, Rotation


def _real_like(rng: np.random.Generator, count: int, dim: int = 384) -> np.ndarray:
    spread = (np.arange(dim) + 8.0) ** -0.6
    mix = np.linalg.qr(rng.standard_normal((dim, dim)))[0]
    rows = (rng.standard_normal((count, dim)) * spread) @ mix + 0.3 * mix[2]
    return normalize_rows(rows.astype(np.float32))


def test_drawn_vectors_keep_the_shape_they_were_fit_to() -> None:
    rng = np.random.default_rng(1)
    real = _real_like(rng, 3000)
    shape = VectorShape.fit(real)
    assert shape.fit_to == 3000
    drawn = shape.draw(np.random.default_rng(2), 20_000)
    assert drawn.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(drawn, axis=1), 1.0, atol=1e-5)
    mean_cosine = float(drawn.mean(axis=0) @ real.mean(axis=0)) / (
        np.linalg.norm(drawn.mean(axis=0)) * np.linalg.norm(real.mean(axis=0))
    )
    assert mean_cosine > 0.99
    turned = Rotation.fit(drawn).turn(drawn)
    energy = (turned**2).sum(axis=0)
    assert energy[:LEAD].sum() > 0.7 * energy.sum()  # random unit vectors: a third


def test_the_embedder_draws_the_same_vectors_for_the_same_seed() -> None:
    shape = VectorShape.fit(_real_like(np.random.default_rng(3), 1000))
    one, two = ShapedEmbedder(shape, seed=7), ShapedEmbedder(shape, seed=7)
    texts = ["Alpha Beta 1", "Gamma Delta 2", "alpha part of beta"]
    np.testing.assert_array_equal(one(texts), two(texts))
    assert one.texts == 3
    assert not np.array_equal(one(texts), ShapedEmbedder(shape, seed=8)(texts))


def test_a_draw_a_block_at_a_time_is_the_draw_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    shape = VectorShape.fit(_real_like(np.random.default_rng(4), 1000))
    whole = shape.draw(np.random.default_rng(5), 700)
    monkeypatch.setattr(entity_vectors, "_DRAW_ROWS", 64)
    np.testing.assert_array_equal(shape.draw(np.random.default_rng(5), 700), whole)
