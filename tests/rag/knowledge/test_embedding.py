"""The embedding model's precisions (``EmbeddingPrecision``): bfloat16 vectors stay
those of float32 within tolerance, and ranks passages the same on a small set."""

from __future__ import annotations

import numpy as np
import pytest

from api.config import Settings
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.models import EmbeddingPrecision

PASSAGES = [
    "Lyon is a city on the Rhone; its old town is listed by UNESCO.",
    "Graz is the capital of Styria, with a clock tower on the Schlossberg.",
    "A git rebase replays commits on top of another base commit.",
    "The warm registry records which prompt prefixes vLLM holds.",
]
QUESTIONS = ["Which river runs through Lyon?", "How do I move my commits onto main?"]


def test_bfloat16_vectors_match_float32_within_tolerance(embedder: Embedder) -> None:
    embedder.warm_up()  # the identity names the model's folder once it is loaded
    bf16 = Embedder(model_path=embedder.model_path, precision=EmbeddingPrecision.BFLOAT16)
    assert bf16.identity == embedder.identity + " bfloat16"
    full, half = embedder.embed_texts(PASSAGES), bf16.embed_texts(PASSAGES)
    assert half.dtype == np.float32 and half.shape == full.shape
    np.testing.assert_allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert (full * half).sum(axis=1).min() > 0.99  # 0.996 at the least on the real corpus
    ranks = [
        np.argsort(-(e.embed_texts(QUESTIONS) @ v.T), axis=1)[:, 0]
        for e, v in ((embedder, full), (bf16, half))
    ]
    np.testing.assert_array_equal(ranks[0], ranks[1])
    np.testing.assert_array_equal(ranks[0], [0, 2])


def test_the_setting_picks_the_process_wide_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARMRAG_EMBEDDING_PRECISION", "bfloat16")
    precision = Settings().embedding_precision
    assert precision is EmbeddingPrecision.BFLOAT16
    assert shared_embedder(precision).precision is EmbeddingPrecision.BFLOAT16
    assert shared_embedder() is shared_embedder(EmbeddingPrecision.FLOAT32)
    assert shared_embedder(precision) is shared_embedder(precision)
