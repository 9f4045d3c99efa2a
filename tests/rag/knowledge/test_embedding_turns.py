"""Whose turn the embedding model is (``Embedder``'s locks): a question on a model of its
own does not wait for a documents' batch; one on the documents' model does. Injected: a
documents' batch that does not end until the test lets it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from rag.knowledge.embedding import Embedder

#: Long enough for a question's embedding on a loaded machine; a test that fails waits it.
TURN_S = 20.0


class HeldBatch:
    """The documents' encoder, held inside its call until ``release``."""

    def __init__(self, encode: object) -> None:
        self.encode = encode
        self.inside = threading.Event()
        self.released = threading.Event()
        self.over = threading.Event()

    def __call__(self, batch: list[str]) -> np.ndarray:
        self.inside.set()
        try:
            assert self.released.wait(TURN_S), "the test never released the batch"
            return self.encode(batch)  # type: ignore[operator]
        finally:
            self.over.set()


@pytest.fixture
def held(embedder: Embedder, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldBatch]:
    """An ingest's batch in progress on ``embedder``'s documents' model."""
    embedder.warm_up()
    batch = HeldBatch(embedder._encode)
    monkeypatch.setattr(embedder, "_encode", batch)
    ingest = threading.Thread(target=embedder.embed_texts, args=(["a chunk of a document"],))
    ingest.start()
    assert batch.inside.wait(TURN_S)
    yield batch
    batch.released.set()
    ingest.join(TURN_S)
    assert not ingest.is_alive()


def test_a_question_does_not_wait_for_a_documents_batch(
    embedder: Embedder, held: HeldBatch
) -> None:
    before = embedder.texts_embedded
    vector = embedder.embed_query("Where was Marie Curie born?")
    assert not held.over.is_set()  # answered while the batch was still running
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    assert embedder.texts_embedded == before + 1


def test_a_question_on_the_documents_model_takes_its_turn_after_the_batch(
    embedder: Embedder, held: HeldBatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bfloat16's questions (and torch's) run on the documents' model: they wait."""
    monkeypatch.setattr(embedder, "_encode_questions", held)
    answered = threading.Event()

    def ask() -> None:
        embedder.embed_query("Where was Marie Curie born?")
        answered.set()

    question = threading.Thread(target=ask)
    question.start()
    assert not answered.wait(0.5)  # behind the batch
    held.released.set()
    assert answered.wait(TURN_S)
    question.join(TURN_S)
