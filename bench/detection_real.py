"""Change detection on real documents: which warm contexts a one-document change makes
the detector retrieve again, against which contexts really changed.

Every question is resolved as warmup would hold it (passages, facts, the prompt prefix
and the bars its context sets), with the service's own read path (``api.retrieval``)
and default settings, graph extraction on. Then, one at a time, a document is revised
and ingested; every question is retrieved afresh, and a context whose prefix changed
is one the detector had to find. Three ways of testing a change's facts are compared on
the same changes:

- ``lowest_bar``: every fact of the changed document against the lowest bar a held fact
  can have (the selector's threshold less its gain), as before each query kept its bars;
- ``own_bar``: every fact of the changed document against each query's own bar;
- ``own_bar_new_facts`` (the product): only the facts new to the graph
  (``ChangeSet.new_facts``), against each query's own bar.

A context missed is one whose prefix changed and which the detector did not flag: the
rule's path-reach test and the selector's candidate cap are left to the scheduled
re-check, which re-retrieves every entry, so such misses can exist; the benchmark
counts them.

    .venv/bin/python -m bench.detection_real [--changes 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import numpy as np
from pydantic import BaseModel

from api.config import Settings
from api.retrieval import ReadPath, build_read_path
from api.stores import build_knowledge
from bench.batches import ingest_in_batches
from rag.chat.change_rule import ContextBars
from rag.chat.memo import retrieve_context
from rag.chat.prompt import PromptBuilder
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.models import ChangeSet, DocumentIn
from warmup.detector import ChangeDetector
from warmup.registry import EntryIndex, QueryMatrix

Log = Callable[[str], None]
VARIANTS = ("lowest_bar", "own_bar", "own_bar_new_facts")
INGEST_BATCH = 50


@dataclass(frozen=True)
class Context:
    """What warmup keeps of one question's warm context."""

    fingerprint: str
    chunk_ids: tuple[str, ...]
    doc_ids: tuple[str, ...]
    embedding: np.ndarray
    bars: ContextBars


class VariantRow(BaseModel):
    affected: int
    missed: int
    detect_ms: float


class ChangeRow(BaseModel):
    doc_id: str
    new_facts: int
    changed: int
    variants: dict[str, VariantRow]


class DetectionResult(BaseModel):
    documents: int
    contexts: int
    changes: list[ChangeRow]

    def mean_affected(self, variant: str) -> float:
        return float(np.mean([c.variants[variant].affected for c in self.changes]))

    def missed(self, variant: str) -> int:
        return sum(c.variants[variant].missed for c in self.changes)


def resolve(
    path: ReadPath, builder: PromptBuilder, questions: Sequence[str], top_k: int
) -> dict[str, Context]:
    """Each question's context, as warmup would register it."""
    contexts = {}
    for question in questions:
        found, _ = retrieve_context(path.retriever, builder, question, top_k)
        contexts[question] = Context(
            fingerprint=found.prefix.fingerprint,
            chunk_ids=tuple(found.prefix.chunk_ids),
            doc_ids=tuple(sorted(found.doc_ids)),
            embedding=np.asarray(found.retrieval.embedding, np.float32),
            bars=path.rule.bars(found.retrieval),
        )
    return contexts


def detect(
    detector: ChangeDetector, contexts: dict[str, Context], change: ChangeSet, variant: str
) -> tuple[set[str], float]:
    """The questions ``variant`` flags, and the milliseconds detection took."""
    keys = sorted(contexts)
    own = variant != "lowest_bar"
    queries = QueryMatrix(
        keys=keys,
        fingerprints=keys,
        embeddings=np.stack([contexts[k].embedding for k in keys]),
        kth_scores=np.array([_or(contexts[k].bars.chunk, -1.0) for k in keys], np.float32),
        fact_bars=np.array(
            [_or(contexts[k].bars.fact, np.nan) if own else np.nan for k in keys], np.float32
        ),
    )
    index = EntryIndex(
        chunk_ids={k: contexts[k].chunk_ids for k in keys},
        doc_ids={k: contexts[k].doc_ids for k in keys},
    )
    tested = (
        change if variant == "own_bar_new_facts" else change.model_copy(update={"new_facts": None})
    )
    found = detector.detect(index, queries, [tested])
    return found.affected, round(found.seconds * 1000, 3)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def measure(
    settings: Settings,
    embedder: Embedder,
    documents: Sequence[DocumentIn],
    questions: Sequence[str],
    revisions: Sequence[DocumentIn],
    log: Log = print,
) -> DetectionResult:
    """Ingest ``documents``, resolve ``questions``, then ingest each of ``revisions``
    alone (a new version of one document) and compare the three variants."""
    knowledge = build_knowledge(settings, embedder)
    path = build_read_path(settings, knowledge, embedder)
    builder = PromptBuilder(order=settings.passage_order)
    detector = ChangeDetector(path.rule)
    knowledge.open()
    try:
        started = time.perf_counter()
        ingest_in_batches(knowledge, documents, INGEST_BATCH)
        log(f"ingested {len(documents)} documents in {time.perf_counter() - started:.0f} s")
        contexts = resolve(path, builder, questions, settings.top_k)
        rows = []
        for revision in revisions:
            change = anyio.run(knowledge.ingest, [revision])
            fresh = resolve(path, builder, questions, settings.top_k)
            changed = {q for q in questions if fresh[q].fingerprint != contexts[q].fingerprint}
            variants = {}
            for variant in VARIANTS:
                affected, ms = detect(detector, contexts, change, variant)
                variants[variant] = VariantRow(
                    affected=len(affected), missed=len(changed - affected), detect_ms=ms
                )
            rows.append(
                ChangeRow(
                    doc_id=revision.id,
                    new_facts=len(change.new_facts or []),
                    changed=len(changed),
                    variants=variants,
                )
            )
            log(rows[-1].model_dump_json())
            contexts = fresh  # what the re-warm leaves registered
    finally:
        knowledge.close()
    return DetectionResult(documents=len(documents), contexts=len(questions), changes=rows)


def real_corpus(changes: int) -> tuple[list[DocumentIn], list[str], list[DocumentIn]]:
    """The real section's corpus, its gold questions, and ``changes`` sections spread
    over it, each revised once (``GitSection.documents(revision=1)``)."""
    from bench.real_corpus import RealWorkload
    from bench.real_records import RealSpec

    workload = RealWorkload(RealSpec.full())
    sections = workload.towns
    documents = [DocumentIn.model_validate(d) for s in sections for d in s.documents()]
    questions = [g.question for g in workload.gold_questions()]
    step = max(1, len(sections) // changes)
    revised = [
        DocumentIn.model_validate(d)
        for s in sections[::step][:changes]
        for d in s.documents(revision=1)
    ]
    return documents, questions, revised


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    documents, questions, revised = real_corpus(args.changes)
    with tempfile.TemporaryDirectory(prefix="warmrag-detection-") as folder:
        settings = Settings(data_dir=Path(folder), seed_sample_kb=False)
        result = measure(settings, shared_embedder(), documents, questions, revised)
    for variant in VARIANTS:
        print(
            f"{variant:>18}: {result.mean_affected(variant):6.1f} of {result.contexts}"
            f" contexts retrieved again per change on average; {result.missed(variant)} missed"
        )
    print(f"really changed: {np.mean([c.changed for c in result.changes]):.1f} per change")
    if args.out is not None:
        args.out.write_text(json.dumps(result.model_dump(), indent=2) + "\n")


if __name__ == "__main__":
    main()
