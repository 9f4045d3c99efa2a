"""The embedder's batching: texts of similar length together, sized by characters, with
results in the caller's order (a fake model, so no weights are loaded)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rag.embedding import EMBEDDING_DIM, MAX_BATCH, WINDOW_CHARS, Embedder, length_batches


class FakeModel:
    """Encodes a text as a unit vector keyed by its length; records each batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
        self.batches.append(list(texts))
        out = np.zeros((len(texts), EMBEDDING_DIM), np.float32)
        for row, text in enumerate(texts):
            out[row, len(text) % EMBEDDING_DIM] = 1.0
        return out


def fake_embedder(batch_size: int = 4) -> tuple[Embedder, FakeModel]:
    embedder = Embedder(batch_size=batch_size)
    model = FakeModel()
    embedder._model = model  # type: ignore[assignment]
    return embedder, model


def test_batches_cover_every_text_once_longest_first() -> None:
    lengths = [5, 900, 30, 900, 5, 1000, 40]
    batches = length_batches(lengths, batch_size=2)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    for batch in batches:
        assert len(batch) * max(min(lengths[i], WINDOW_CHARS) for i in batch) <= 2 * WINDOW_CHARS


def test_short_texts_share_large_batches_long_ones_do_not() -> None:
    assert [len(b) for b in length_batches([20] * 600, batch_size=16)] == [
        MAX_BATCH,
        MAX_BATCH,
        600 - 2 * MAX_BATCH,
    ]
    # Full-window chunks keep the configured batch size: a chat waits no longer than before.
    assert {len(b) for b in length_batches([5000] * 64, batch_size=16)} == {16}
    assert length_batches([], batch_size=16) == []


def test_results_come_back_in_the_callers_order() -> None:
    embedder, model = fake_embedder()
    texts = ["a" * n for n in (3, 700, 12, 1, 700, 40)]
    vectors = embedder.embed_texts(texts)
    assert vectors.shape == (len(texts), EMBEDDING_DIM)
    for text, row in zip(texts, vectors, strict=True):
        assert row[len(text) % EMBEDDING_DIM] == 1.0
    assert embedder.texts_embedded == len(texts)
    assert sorted(t for b in model.batches for t in b) == sorted(texts)
    assert embedder.embed_texts([]).shape == (0, EMBEDDING_DIM)
