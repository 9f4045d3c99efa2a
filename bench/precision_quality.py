"""What an embedding precision does to retrieval on the real corpus, through the
service's own read path.

For each precision, the real section's documents are ingested in-process into the
service's default stores (``KnowledgeService.ingest``, as ``POST /admin/documents``
runs it, graph included), then:

- recall@1/3/10 of each gold question's section (``bench.retrieval_quality``);
- each question and a rewording of it (``reworded``: "How do I" → "How can I" and the
  like) retrieved as a chat would: whether both build the same prompt prefix, the
  same passages, the same facts. A rewording of a warmed question is a warm hit at
  first sight only when its prefix is the same, so this is what first-sight
  prediction can reach, whatever it predicts.

Ingest speed per precision is ``bench.ingest_rate``'s to measure, not this module's.

    python -m bench.precision_quality [--precisions float32 int8] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

from api.config import Settings
from api.retrieval import build_read_path
from api.stores import build_knowledge
from bench.batches import ingest_in_batches
from bench.machine import Machine, this_machine
from bench.paths import bench_dir
from bench.real_corpus import RealWorkload
from bench.real_records import QualitySummary, RealSpec
from bench.record import Record
from bench.retrieval_quality import GoldQuestion, evaluate_service
from rag.chat.prompt import PromptBuilder
from rag.chat.retriever import Retrieval, Retriever
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn, EmbeddingPrecision

#: Rewordings by rule, the first that matches: the forms ``bench.asciidoc.question_for``
#: writes the corpus's questions in.
REWORDINGS: tuple[tuple[str, str], ...] = (
    (r"^How do I (.*)\?$", r"How can I \1?"),
    (r"^What does (.*) do\?$", r"What is \1 for?"),
    (r"^Which options does (.*) accept\?$", r"What options does \1 take?"),
    (r"^How can (.*) be configured\?$", r"How do I configure \1?"),
    (r"^What should I know about (.*)\?$", r"What do I need to know about \1?"),
    (r"^What is (.*)\?$", r"What's \1?"),
)
#: Documents per ingest call, as ``bench.ingest_rate`` sends them.
BATCH = 20


def reworded(question: str) -> str | None:
    """The question reworded by the first rule that matches it; None if none does."""
    for pattern, replacement in REWORDINGS:
        if re.match(pattern, question):
            return re.sub(pattern, replacement, question)
    return None


class PairAgreement(Record):
    """Of ``pairs`` (question, rewording): how many built the same prompt prefix, the
    same passages, the same facts."""

    pairs: int
    same_prefix: int
    same_passages: int
    same_facts: int


class PrecisionQuality(Record):
    precision: EmbeddingPrecision
    chunks: int
    quality: QualitySummary
    rewordings: PairAgreement


class PrecisionReport(Record):
    machine: Machine
    results: list[PrecisionQuality]


def agreement(
    retriever: Retriever, builder: PromptBuilder, pairs: Sequence[tuple[str, str]]
) -> PairAgreement:
    """Retrieve both wordings of each pair as a chat does, and compare their prefixes."""
    return same_prompts(builder, [(retriever.retrieve(a), retriever.retrieve(b)) for a, b in pairs])


def same_prompts(
    builder: PromptBuilder, pairs: Sequence[tuple[Retrieval, Retrieval]]
) -> PairAgreement:
    """How many pairs of retrievals build the same prompt prefix, passages and facts."""

    def same(a: Retrieval, b: Retrieval, passages: bool = True, facts: bool = True) -> bool:
        def key(r: Retrieval) -> str:
            shown = builder.prefix(r.passages if passages else (), r.triples if facts else ())
            return shown.fingerprint

        return key(a) == key(b)

    prefix = passages = facts = 0
    for a, b in pairs:
        prefix += same(a, b)
        passages += same(a, b, facts=False)
        facts += same(a, b, passages=False)
    return PairAgreement(
        pairs=len(pairs), same_prefix=prefix, same_passages=passages, same_facts=facts
    )


def measure(
    precision: EmbeddingPrecision,
    documents: Sequence[DocumentIn],
    golds: Sequence[GoldQuestion],
    folder: Path,
) -> PrecisionQuality:
    """Ingest ``documents`` in ``precision`` into the default stores in ``folder``, then
    score retrieval on ``golds`` and their rewordings."""
    settings = Settings(data_dir=folder, seed_sample_kb=False, embedding_precision=precision)
    embedder = Embedder(precision=precision)
    knowledge = build_knowledge(settings, embedder)
    knowledge.open()
    try:
        ingest_in_batches(knowledge, documents, BATCH)
        retriever = build_read_path(settings, knowledge, embedder).retriever
        builder = PromptBuilder(order=settings.passage_order)
        pairs = [(g.question, r) for g in golds if (r := reworded(g.question)) is not None]
        return PrecisionQuality(
            precision=precision,
            chunks=knowledge.kb.count_chunks(),
            quality=evaluate_service(retriever, golds).summary(),
            rewordings=agreement(retriever, builder, pairs),
        )
    finally:
        knowledge.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--precisions",
        nargs="+",
        type=EmbeddingPrecision,
        default=[EmbeddingPrecision.FLOAT32, EmbeddingPrecision.INT8],
    )
    parser.add_argument("--quick", action="store_true", help="the quick real section")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    workload = RealWorkload(RealSpec.quick() if args.quick else RealSpec.full())
    documents = [DocumentIn.model_validate(d, strict=False) for d in workload.documents()]
    golds = workload.gold_questions()
    results = []
    for precision in args.precisions:
        with bench_dir() as folder:
            result = measure(precision, documents, golds, folder)
        print(result.model_dump_json(), flush=True)
        results.append(result)
    if args.out is not None:
        report = PrecisionReport(machine=this_machine(enforce_eager=False), results=results)
        args.out.write_text(report.model_dump_json(indent=1) + "\n")


if __name__ == "__main__":
    main()
