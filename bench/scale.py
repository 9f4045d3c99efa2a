"""The suite's "scale" section: how warmrag's four size-dependent paths behave as data grows.

Ingest throughput through the real pipeline (``KnowledgeBase.upsert``) next to the embedding
model's raw throughput on the same chunk texts (the pipeline's overhead); the product's read path
(``KnowledgeBase.retrieve``, query embedding excluded) on the embedded default's index (a
Qdrant Edge shard in its own process) at 10k and 100k chunks, with the index's recall@10
against exact search, its HNSW build, a restart and RSS; knowledge-graph subgraph selection
at 1k, 10k and 50k triples (``bench/kg_subgraph.py``); and change detection for a
one-document change against 100, 1k and 10k warm entries, with cold and warm caches
(``bench/detection_scaling.py``); the entity link by embedding at 100k chunks' entities,
reading the nearest cells against every row (``bench/entity_cells.py``). Embedding 100k
real chunks would take hours here, so the retrieval collection holds the ingested chunks'
real embeddings plus re-normalized noisy copies of them (same texts, so passages stay
real and scores realistic), grown size by size the way the KB's embedded write commits:
points written through the index, carrying their document's content hash, then the
docstore (the commit point) naming each copy's document with that hash, and the KB
opened again. Retrieval only returns chunks whose hash
is their document's committed one, so points written any other way would be hidden from
it. 1M chunks are measured on the bare stores by the "index" section
(``bench/embedded_index.py``). Last, alone, with a vLLM of its own: the service's
start-up and memory on a data folder of 100k chunks and a graph (``bench/scale_startup.py``).

    .venv/bin/python bench/scale.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench import detection_scaling, entity_cells, kg_multihop, kg_subgraph, scale_startup
from bench.ingest_rate import measure_kb_ingest
from bench.measure import percentile
from bench.paths import bench_dir
from bench.scale_copies import Chunk, copies_between
from bench.scale_index import Stored, build_while_searching, index_recall, rss_mib
from bench.scale_records import (
    DetectionRow,
    RetrievalRow,
    ScaleIngest,
    ScaleResult,
    SubgraphRow,
)
from bench.workload import towns
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.edge import EdgeIndex
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.models import ChangeSet, DocumentIn
from rag.knowledge.state import KBState

COLLECTION = "warmrag"  # the KnowledgeBase's default
INGEST_BATCH = 100  # documents per alternation of pipeline ingest and raw embedding
WARMUP_QUERIES = 10


@dataclass(frozen=True)
class Plan:
    """Sizes and counts of one run (towns: ingested, ~3 chunks each; questions: subgraph)."""

    towns: int
    queries: int
    chunk_sizes: list[int]
    triple_sizes: list[int]
    questions: int
    entry_sizes: list[int]
    detection_rounds: int
    multihop_worlds: int
    entity_sizes: list[int]
    startup_sizes: list[int]


def plan(quick: bool) -> Plan:
    if quick:
        return Plan(
            towns=60,
            queries=50,
            chunk_sizes=[1_000, 10_000],
            triple_sizes=[1_000, 10_000],
            questions=50,
            entry_sizes=[100, 1_000],
            detection_rounds=5,
            multihop_worlds=20,
            entity_sizes=[20_000],
            startup_sizes=[10_000],
        )
    return Plan(
        towns=200,
        queries=200,
        chunk_sizes=[10_000, 100_000],
        triple_sizes=[1_000, 10_000, 50_000],
        questions=200,
        entry_sizes=[100, 1_000, 10_000],
        detection_rounds=9,
        multihop_worlds=60,
        entity_sizes=[209_456],  # 100,000 chunks' entities
        startup_sizes=[100_000],
    )


def run_scale(quick: bool, work: Path, log: Callable[[str], None] = print) -> ScaleResult:
    """Run the scale section; ``work`` is the caller's folder for all temporary state."""
    p = plan(quick)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def step(message: str) -> None:
        log(f"scale [{time.perf_counter() - started:5.1f} s] {message}")

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Local mode is not recommended", category=UserWarning
        )
        embedder = shared_embedder()
        ingest, chunks, vectors = ingest_towns(p.towns, work / "ingest", embedder)
        step(
            f"ingest: {ingest.chunks} chunks, {ingest.ingest_chunks_per_s:.0f}/s"
            f" vs raw {ingest.raw_chunks_per_s:.0f}/s"
        )
        retrieval = measure_retrieval(p, work / "retrieval", embedder, chunks, vectors, step)
        subgraph = []
        for size in p.triple_sizes:
            r = kg_subgraph.bench(size, p.questions, None)  # None: the selector's min_score
            subgraph.append(
                SubgraphRow(
                    triples=r.triples,
                    p50_ms=round(r.p50_ms, 3),
                    p99_ms=round(r.p99_ms, 3),
                    questions=p.questions,
                )
            )
            step(f"subgraph: {size} triples, p50 {r.p50_ms:.2f} ms")
        graph_quality = kg_multihop.run(p.multihop_worlds)
        step("graph quality: two-step questions, " + ", ".join(
            f"{r.mode} ({r.questions_set}) {r.answer_share:.0%}" for r in graph_quality
        ))  # fmt: skip
        detection = []
        rng = np.random.default_rng(3)  # as detection_scaling.main: one generator for all sizes
        for n in p.entry_sizes:
            cold, warm = measure_detection(n, p.detection_rounds, rng)
            detection.append(DetectionRow(entries=n, cold_p50_ms=cold, warm_p50_ms=warm))
            step(f"detection: {n} entries, cold {cold:.1f} ms, warm {warm:.2f} ms")
        entity_link = entity_cells.run(p.entity_sizes, p.questions, log=step)
        startup = []
        if p.startup_sizes:  # last and alone: it starts a vLLM for the services it starts
            startup = scale_startup.run(
                p.startup_sizes,
                True,
                work / "startup",
                chunks,
                vectors,
                log=step,
                embedding=embedder.identity,
            )
    return ScaleResult(
        ingest=ingest,
        retrieval=retrieval,
        subgraph=subgraph,
        graph_quality=graph_quality,
        detection=detection,
        startup=startup,
        entity_link=entity_link,
    )


def ingest_towns(
    town_count: int, folder: Path, embedder: Embedder
) -> tuple[ScaleIngest, list[Chunk], np.ndarray]:
    """Chunks/s through ``KnowledgeBase.upsert`` (split, embed, Qdrant, docstore) and of the
    embedding model alone on the same chunk texts (``bench.ingest_rate.measure_kb_ingest``);
    also returns the chunks and the embeddings the KB stored for them (title included, as
    the product embeds them)."""
    docs = [DocumentIn.model_validate(d) for t in towns(town_count) for d in t.documents()]
    chunks: list[Chunk] = []
    parts: list[np.ndarray] = []

    def keep(batch: Sequence[DocumentIn], change: ChangeSet, kb: KnowledgeBase) -> None:
        stored = {c.chunk_id: c.embedding for c in change.added_chunks}
        new = [(d, n, chunk) for d in batch for n, chunk in enumerate(kb.chunks(d.id))]
        parts.append(np.array([stored[chunk.chunk_id] for _, _, chunk in new], np.float32))
        chunks.extend(
            Chunk(d.id, kb.document_hash(d.id) or "", n, chunk.text, dict(d.metadata))
            for d, n, chunk in new
        )

    runs = measure_kb_ingest(docs, folder, embedder, INGEST_BATCH, keep)
    ingest, raw = runs.chunk_only.chunks_per_s, runs.raw.chunks_per_s
    result = ScaleIngest(
        chunks=len(chunks),
        documents=len(docs),
        ingest_chunks_per_s=round(ingest, 1),
        raw_chunks_per_s=round(raw, 1),
        ratio=round(ingest / raw, 3),
    )
    return result, chunks, np.concatenate(parts)


def measure_retrieval(
    p: Plan,
    folder: Path,
    embedder: Embedder,
    chunks: list[Chunk],
    vectors: np.ndarray,
    step: Callable[[str], None],
) -> list[RetrievalRow]:
    """``kb.retrieve`` on the embedded default's index (a Qdrant Edge shard in its own
    process) as one collection grows through ``p.chunk_sizes``; at each size also the
    index's recall@10 against exact search, its HNSW build, a restart (the knowledge base
    opened again on the folder) and the RSS of both processes."""
    questions = [(t.name.lower(), q) for t in towns(p.towns) for q in t.questions()]
    questions = random.Random(5).sample(questions, min(p.queries, len(questions)))
    queries = embedder.embed_texts([q for _, q in questions])
    rng = np.random.default_rng(17)
    index = EdgeIndex(folder / "edge", vectors.shape[1])
    index.open()
    folder.mkdir(parents=True, exist_ok=True)
    state = KBState.open(folder)
    stored = Stored()
    results = []
    try:
        for size in p.chunk_sizes:
            t0 = time.perf_counter()
            for nodes in copies_between(chunks, vectors, stored.count, size, rng):
                index.add(nodes)
                stored.extend(nodes)
                for node in nodes:
                    state.docstore.set_document_hash(
                        node.ref_doc_id or "", node.metadata[DOC_HASH_KEY]
                    )
            insert_s = time.perf_counter() - t0
            index_s, waited_s = build_while_searching(index, queries)
            state.version += 1
            state.save()  # the commit point: the KB opened next sees these documents
            index.close()
            t0 = time.perf_counter()
            index = EdgeIndex(folder / "edge", vectors.shape[1])
            kb = KnowledgeBase(folder, index, embedder, collection=COLLECTION)  # opens: a restart
            open_s = time.perf_counter() - t0
            # reconcile (run at open) deletes points no committed document owns
            assert kb.count_chunks() == size, (kb.count_chunks(), size)
            row = time_retrieval(kb, questions, queries)
            recall = index_recall(index, stored, queries)
            results.append(
                row.model_copy(
                    update={
                        "recall_at_10": round(recall, 4),
                        "index_s": round(index_s, 1),
                        "search_wait_max_s": round(waited_s, 2),
                        "open_s": round(open_s, 2),
                        "rss_mib": rss_mib(),
                        "index_rss_mib": round(index.rss_bytes() / 2**20),
                    }
                )
            )
            step(
                f"retrieval: {size} chunks (+{insert_s:.1f} s to insert, {index_s:.1f} s HNSW),"
                f" p50 {row.p50_ms:.1f} ms, p99 {row.p99_ms:.1f} ms, recall@10 {recall:.3f},"
                f" a search waited up to {waited_s:.1f} s during the build,"
                f" open {open_s:.1f} s, top-1 own town {row.top1_own_town_share:.0%}"
            )
    finally:
        index.close()
        state.close()
    return results


def time_retrieval(
    kb: KnowledgeBase, questions: Sequence[tuple[str, str]], queries: np.ndarray
) -> RetrievalRow:
    for query in queries[:WARMUP_QUERIES]:
        kb.retrieve(query, top_k=3)
    latencies = []
    hits = 0
    for (town, _), query in zip(questions, queries, strict=True):
        t0 = time.perf_counter()
        passages = kb.retrieve(query, top_k=3)
        latencies.append((time.perf_counter() - t0) * 1000)
        # Proper passages, and the question's own town on top (a copy counts).
        assert len(passages) == 3 and all(x.text for x in passages), passages
        hits += passages[0].doc_id.startswith(f"{town}-")
    return RetrievalRow(
        chunks=kb.count_chunks(),
        p50_ms=round(statistics.median(latencies), 3),
        p95_ms=round(percentile(latencies, 95), 3),
        p99_ms=round(percentile(latencies, 99), 3),
        queries=len(latencies),
        top1_own_town_share=round(hits / len(latencies), 3),
    )


def measure_detection(n: int, rounds: int, rng: np.random.Generator) -> tuple[float, float]:
    """detection_scaling's measurement for one size: (cold p50 ms, warm p50 ms)."""
    cold, warm, _ = detection_scaling.measure(n, rounds, rng)
    return round(percentile(cold, 50), 3), round(percentile(warm, 50), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    args = parser.parse_args()
    with bench_dir() as folder:
        result = run_scale(args.quick, folder, log=lambda line: print(line, file=sys.stderr))
    print(json.dumps(result.to_json(), indent=2))


if __name__ == "__main__":
    main()
