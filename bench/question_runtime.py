"""What a question's embedding costs in the service's question precision, in float32 on
ONNX Runtime and on torch, and whether their vectors build the same prompts on the real
corpus.

The real section's documents are ingested in-process into the service's default stores
(the default precision, graph included). Then each gold question and its rewording
(``bench.precision_quality.reworded``) is embedded, in turn, by:

- ``service``: the service's embedder (``Embedder.embed_query``: its question precision,
  int8 by default on a CPU with VNNI or AMX: ``rag.knowledge.onnx_blocks``);
- ``float32``: the float32 export (``QuestionPrecision.FLOAT32``);
- ``torch``: the same model in sentence-transformers on torch, one thread, as questions
  were embedded before;
- and the floor: the arithmetic of the model's matrix products for the question's
  word-pieces (``MatrixFloor``), at the best rate this core multiplies float32 matrices.

Their order alternates from one question to the next, so that a drift of the host
weighs on all. Each question is then retrieved as a chat does with each vector
(``Retriever.retrieve``, the vector given): same prompt prefix, same passages, same
facts; recall@3 and the rewordings that build their question's prefix, by runtime.
It fails (exit 1) where float32's and torch's vectors differ by more than ``TOLERANCE``,
or where the service's recall@3 is more than ``RECALL_MARGIN`` below float32's.

    python -m bench.question_runtime [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from api.config import Settings
from api.retrieval import build_read_path
from api.stores import build_knowledge
from bench.batches import ingest_in_batches
from bench.machine import Machine, this_machine
from bench.measure import percentile
from bench.paths import bench_dir
from bench.precision_quality import BATCH, PairAgreement, reworded, same_prompts
from bench.real_corpus import RealWorkload
from bench.real_records import QualitySummary, RealSpec
from bench.record import Record
from bench.retrieval_quality import GoldQuestion, evaluate_service
from rag.chat.prompt import PromptBuilder
from rag.chat.query import retrieval_text
from rag.chat.retriever import Retrieval, Retriever
from rag.knowledge.embedding import Embedder, bundled_model_path
from rag.knowledge.models import DocumentIn, EmbeddingPrecision, QuestionPrecision

#: The most float32's and torch's vectors may differ by, value by value (measured: 1.9e-7).
TOLERANCE = 1e-5
#: The most the service's recall@3 may fall below float32's questions' (issue 26's bar).
RECALL_MARGIN = 0.01
RUNTIMES = ("service", "float32", "torch")


class Timing(Record):
    """A question's embedding time (or its floor), in milliseconds."""

    p50_ms: float
    p99_ms: float


class RuntimeResult(Record):
    """One runtime's questions: their embedding time, and what their vectors retrieve."""

    timing: Timing
    #: Of the gold questions, through the read path.
    quality: QualitySummary
    #: Of the (gold question, rewording) pairs: each built with this runtime's vectors.
    rewordings: PairAgreement


class QuestionRuntimeReport(Record):
    machine: Machine
    precision: EmbeddingPrecision
    question_precision: QuestionPrecision
    chunks: int
    questions: int
    runtimes: dict[str, RuntimeResult]
    floor: Timing
    #: float32's p50 over the service's, and torch's over float32's.
    speedup: float
    float32_speedup: float
    #: float32's and torch's vectors, value by value (``TOLERANCE``).
    max_abs_difference: float
    #: The service's vectors against float32's.
    least_cosine: float
    #: Of ``pairs`` (each question with the service's and float32's vector): the same
    #: prompt prefix, passages and facts.
    agreement: PairAgreement


class MatrixFloor:
    """How long a question's matrix products take at least: their multiply-adds (each
    linear layer's weights, once a word-piece) at the best rate measured for a product
    the size of the model's feed-forward layer over ``RATE_TOKENS`` word-pieces, on
    one thread. Attention, the norms and the runtime's own work come on top."""

    RATE_TOKENS = 128

    def __init__(self, model: SentenceTransformer) -> None:
        layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        self.weights = sum(layer.in_features * layer.out_features for layer in layers)
        widest = max(layers, key=lambda layer: layer.in_features * layer.out_features)
        rows = torch.randn(self.RATE_TOKENS, widest.in_features)
        weight = widest.weight.detach().T.contiguous()
        best = min(timed(lambda: torch.mm(rows, weight)) for _ in range(50))
        #: Float operations a millisecond.
        self.rate = 2 * self.RATE_TOKENS * widest.in_features * widest.out_features / best

    def ms(self, tokens: int) -> float:
        return 2 * tokens * self.weights / self.rate


def timed(run: Callable[[], object]) -> float:
    """Milliseconds ``run`` took."""
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def embeddings_of(
    text: str, embedder: Embedder, float32: Embedder, reference: SentenceTransformer
) -> dict[str, Callable[[], np.ndarray]]:
    """The question's vector by each runtime, by name (module docstring)."""
    return {
        "service": lambda: embedder.embed_query(text),
        "float32": lambda: float32.embed_query(text),
        "torch": lambda: reference.encode([text], normalize_embeddings=True)[0],
    }


def timing(samples: Sequence[float]) -> Timing:
    return Timing(
        p50_ms=round(statistics.median(samples), 3), p99_ms=round(percentile(samples, 99), 3)
    )


class GivenVectors:
    """The retriever with each question's vector given (a ``PassageRetriever``)."""

    def __init__(self, retriever: Retriever, vectors: Mapping[str, np.ndarray]) -> None:
        self._retriever = retriever
        self._vectors = vectors

    def retrieve(self, question: str, top_k: int = 3) -> Retrieval:
        return self._retriever.retrieve(question, top_k, embedding=self._vectors[question])


def measure(
    documents: Sequence[DocumentIn], golds: Sequence[GoldQuestion], folder: Path
) -> QuestionRuntimeReport:
    """Ingest ``documents`` into the default stores in ``folder``, then embed and
    retrieve ``golds`` and their rewordings with each runtime (module docstring)."""
    pairs = [(g.question, r) for g in golds if (r := reworded(g.question)) is not None]
    questions = list(dict.fromkeys([g.question for g in golds] + [r for _, r in pairs]))
    settings = Settings(data_dir=folder, seed_sample_kb=False)
    embedder = Embedder(precision=settings.embedding_precision, questions=settings.question_default)
    knowledge = build_knowledge(settings, embedder)
    knowledge.open()
    try:
        ingest_in_batches(knowledge, documents, BATCH)
        retriever = build_read_path(settings, knowledge, embedder).retriever
        float32 = Embedder(precision=embedder.precision, questions=QuestionPrecision.FLOAT32)
        torch.set_num_threads(embedder.threads)
        reference = SentenceTransformer(str(bundled_model_path()), device="cpu")
        floor = MatrixFloor(reference)
        samples: dict[str, list[float]] = {name: [] for name in (*RUNTIMES, "floor")}
        vectors: dict[str, dict[str, np.ndarray]] = {name: {} for name in RUNTIMES}
        for i, question in enumerate(questions):
            text = retrieval_text(question)
            runs = embeddings_of(text, embedder, float32, reference)
            for name in runs if i % 2 == 0 else reversed(runs):
                started = time.perf_counter()
                vectors[name][question] = runs[name]()
                samples[name].append((time.perf_counter() - started) * 1000)
            samples["floor"].append(floor.ms(embedder.count_tokens(text)))
        rows = {name: np.asarray([vectors[name][q] for q in questions]) for name in RUNTIMES}
        builder = PromptBuilder(order=settings.passage_order)
        results = {
            name: RuntimeResult(
                timing=timing(samples[name]),
                quality=evaluate_service(GivenVectors(retriever, vectors[name]), golds).summary(),
                rewordings=compare(
                    retriever,
                    builder,
                    [a for a, _ in pairs],
                    np.asarray([vectors[name][a] for a, _ in pairs]),
                    np.asarray([vectors[name][b] for _, b in pairs]),
                ),
            )
            for name in RUNTIMES
        }
        p50 = {name: statistics.median(samples[name]) for name in RUNTIMES}
        return QuestionRuntimeReport(
            machine=this_machine(enforce_eager=False),
            precision=embedder.precision,
            question_precision=embedder.questions,
            chunks=knowledge.kb.count_chunks(),
            questions=len(questions),
            runtimes=results,
            floor=timing(samples["floor"]),
            speedup=round(p50["float32"] / p50["service"], 2),
            float32_speedup=round(p50["torch"] / p50["float32"], 2),
            max_abs_difference=float(np.abs(rows["float32"] - rows["torch"]).max()),
            least_cosine=float((rows["service"] * rows["float32"]).sum(axis=1).min()),
            agreement=compare(retriever, builder, questions, rows["service"], rows["float32"]),
        )
    finally:
        knowledge.close()


def compare(
    retriever: Retriever,
    builder: PromptBuilder,
    questions: Sequence[str],
    first: np.ndarray,
    second: np.ndarray,
) -> PairAgreement:
    """Retrieve each question with its vector in ``first`` and in ``second``, as a chat
    does, and compare the prompts they build."""
    retrievals = [
        (retriever.retrieve(q, embedding=a), retriever.retrieve(q, embedding=b))
        for q, a, b in zip(questions, first, second, strict=True)
    ]
    return same_prompts(builder, retrievals)


def failures(report: QuestionRuntimeReport) -> list[str]:
    """What makes the run fail (module docstring)."""
    found = []
    if report.max_abs_difference > TOLERANCE:
        found.append(
            f"float32's and torch's question vectors differ by "
            f"{report.max_abs_difference:.2e}, more than {TOLERANCE:.0e}"
        )
    recall = {name: r.quality.recall_at_3 for name, r in report.runtimes.items()}
    if recall["service"] < recall["float32"] - RECALL_MARGIN:
        found.append(
            f"the service's questions ({report.question_precision}) recall {recall['service']} "
            f"at 3, more than {RECALL_MARGIN} below float32's {recall['float32']}"
        )
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick real section")
    parser.add_argument("--out", type=Path, help="write the result here as JSON")
    args = parser.parse_args(argv)
    workload = RealWorkload(RealSpec.quick() if args.quick else RealSpec.full())
    documents = [DocumentIn.model_validate(d, strict=False) for d in workload.documents()]
    with bench_dir() as folder:
        report = measure(documents, workload.gold_questions(), folder)
    print(report.model_dump_json(), flush=True)
    if args.out is not None:
        args.out.write_text(report.model_dump_json(indent=1) + "\n")
    if found := failures(report):
        sys.exit("; ".join(found))


if __name__ == "__main__":
    main()
