"""What a question's embedding costs on ONNX Runtime in float32 against torch, and whether
the two runtimes' vectors build the same prompts on the real corpus.

The real section's documents are ingested in-process into the service's default stores
(the default precision, graph included). Then each gold question and its rewording
(``bench.precision_quality.reworded``) is embedded, in turn, by:

- ``onnx``: the service's embedder (``Embedder.embed_query``: the float32 export);
- ``torch``: the same model in sentence-transformers on torch, one thread, as questions
  were embedded before;
- and the floor: the arithmetic of the model's matrix products for the question's
  word-pieces (``MatrixFloor``), at the best rate this core multiplies float32 matrices.

Their order alternates from one question to the next, so that a drift of the host
weighs on both. Each question is then retrieved as a chat does with either vector
(``Retriever.retrieve``, the vector given): same prompt prefix, same passages, same
facts. It fails (exit 1) where the two runtimes' vectors differ by more than
``TOLERANCE``.

    python -m bench.question_runtime [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
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
from bench.real_records import RealSpec
from bench.record import Record
from rag.chat.prompt import PromptBuilder
from rag.chat.query import retrieval_text
from rag.chat.retriever import Retriever
from rag.knowledge.embedding import Embedder, bundled_model_path
from rag.knowledge.models import DocumentIn, EmbeddingPrecision

#: The most the runtimes' vectors may differ by, value by value (measured: 1.9e-7).
TOLERANCE = 1e-5


class Timing(Record):
    """A question's embedding time (or its floor), in milliseconds."""

    p50_ms: float
    p99_ms: float


class QuestionRuntimeReport(Record):
    machine: Machine
    precision: EmbeddingPrecision
    chunks: int
    questions: int
    onnx: Timing
    torch: Timing
    floor: Timing
    #: torch's p50 over the export's.
    speedup: float
    max_abs_difference: float
    least_cosine: float
    #: Of ``pairs`` (each question with either runtime's vector): the same prompt prefix,
    #: passages and facts.
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
    text: str, embedder: Embedder, reference: SentenceTransformer
) -> dict[str, Callable[[], np.ndarray]]:
    """The question's vector by each runtime, by name (module docstring)."""
    return {
        "onnx": lambda: embedder.embed_query(text),
        "torch": lambda: reference.encode([text], normalize_embeddings=True)[0],
    }


def timing(samples: Sequence[float]) -> Timing:
    return Timing(
        p50_ms=round(statistics.median(samples), 3), p99_ms=round(percentile(samples, 99), 3)
    )


def measure(
    documents: Sequence[DocumentIn], questions: Sequence[str], folder: Path
) -> QuestionRuntimeReport:
    """Ingest ``documents`` into the default stores in ``folder``, then embed and
    retrieve ``questions`` with both runtimes (module docstring)."""
    settings = Settings(data_dir=folder, seed_sample_kb=False)
    embedder = Embedder(precision=settings.embedding_precision)
    knowledge = build_knowledge(settings, embedder)
    knowledge.open()
    try:
        ingest_in_batches(knowledge, documents, BATCH)
        retriever = build_read_path(settings, knowledge, embedder).retriever
        torch.set_num_threads(embedder.threads)
        reference = SentenceTransformer(str(bundled_model_path()), device="cpu")
        floor = MatrixFloor(reference)
        samples: dict[str, list[float]] = {"onnx": [], "torch": [], "floor": []}
        vectors: dict[str, list[np.ndarray]] = {"onnx": [], "torch": []}
        for i, question in enumerate(questions):
            text = retrieval_text(question)
            runs = embeddings_of(text, embedder, reference)
            for name in runs if i % 2 == 0 else reversed(runs):
                started = time.perf_counter()
                vectors[name].append(runs[name]())
                samples[name].append((time.perf_counter() - started) * 1000)
            samples["floor"].append(floor.ms(embedder.count_tokens(text)))
        onnx, reference_rows = np.asarray(vectors["onnx"]), np.asarray(vectors["torch"])
        builder = PromptBuilder(order=settings.passage_order)
        agreement = compare(retriever, builder, questions, onnx, reference_rows)
        return QuestionRuntimeReport(
            machine=this_machine(enforce_eager=False),
            precision=embedder.precision,
            chunks=knowledge.kb.count_chunks(),
            questions=len(questions),
            onnx=timing(samples["onnx"]),
            torch=timing(samples["torch"]),
            floor=timing(samples["floor"]),
            speedup=round(
                statistics.median(samples["torch"]) / statistics.median(samples["onnx"]), 2
            ),
            max_abs_difference=float(np.abs(onnx - reference_rows).max()),
            least_cosine=float((onnx * reference_rows).sum(axis=1).min()),
            agreement=agreement,
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the quick real section")
    parser.add_argument("--out", type=Path, help="write the result here as JSON")
    args = parser.parse_args(argv)
    workload = RealWorkload(RealSpec.quick() if args.quick else RealSpec.full())
    documents = [DocumentIn.model_validate(d, strict=False) for d in workload.documents()]
    golds = [g.question for g in workload.gold_questions()]
    questions = golds + [r for q in golds if (r := reworded(q)) is not None]
    with bench_dir() as folder:
        report = measure(documents, questions, folder)
    print(report.model_dump_json(), flush=True)
    if args.out is not None:
        args.out.write_text(report.model_dump_json(indent=1) + "\n")
    if report.max_abs_difference > TOLERANCE:
        sys.exit(
            f"the runtimes' question vectors differ by {report.max_abs_difference:.2e}, "
            f"more than {TOLERANCE:.0e}"
        )


if __name__ == "__main__":
    main()
