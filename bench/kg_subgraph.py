"""Latency of knowledge-graph subgraph selection at 1k, 10k and 50k triples.

Builds synthetic graphs (Zipf-skewed entity popularity, so there are hubs; 10 triples per
chunk, 5 chunks per document) whose node and triple embeddings are random unit vectors, then
times ``SubgraphSelector.select`` for 200 questions per size. Each question names one entity,
comes with three retrieved passages, and has an embedding close to one triple and its subject,
so all three linking routes fire. Target: p50 <= 10 ms at 50k triples.

Run: ``.venv/bin/python bench/kg_subgraph.py [--sizes 1000 10000 50000] [--questions 200]``
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paths import bench_dir
from kg import KnowledgeGraph, SubgraphSelector, Triple
from kg.paths import DEFAULT_WEIGHTS

DIM = 384
TRIPLES_PER_CHUNK = 10
CHUNKS_PER_DOC = 5
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "omega",
    "north",
    "south",
    "river",
    "stone",
    "bridge",
    "tower",
    "garden",
    "harbor",
    "castle",
    "forest",
    "valley",
    "meadow",
    "signal",
    "vector",
    "kernel",
    "cache",
    "prefix",
    "engine",
    "socket",
    "cluster",
]
PREDICATES = ["part of", "located in", "created by", "depends on", "uses", "owns", "near"]


class RandomEmbedder:
    """Unit vectors from a seeded generator; counts texts so the bench can report them."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)
        self.texts = 0

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        vectors = self._rng.standard_normal((len(texts), DIM)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def entity_name(i: int) -> str:
    return f"{WORDS[i % len(WORDS)].title()} {WORDS[(i // len(WORDS)) % len(WORDS)].title()} {i}"


def build_graph(folder: Path, size: int, rng: np.random.Generator) -> KnowledgeGraph:
    """A graph of ``size`` triples over about size/5 entities with Zipf-like popularity."""
    entities = max(50, size // 5)
    weights = 1.0 / (np.arange(entities) + 10.0) ** 0.9
    weights /= weights.sum()
    subjects = rng.choice(entities, size=size, p=weights)
    objects = rng.choice(entities, size=size, p=weights)
    same = subjects == objects
    objects[same] = (objects[same] + 1) % entities
    predicates = rng.integers(0, len(PREDICATES), size=size)
    documents: dict[str, list[Triple]] = {}
    per_doc = TRIPLES_PER_CHUNK * CHUNKS_PER_DOC
    for i in range(size):
        doc_id = f"doc{i // per_doc}"
        documents.setdefault(doc_id, []).append(
            Triple(
                subject=entity_name(int(subjects[i])),
                predicate=PREDICATES[int(predicates[i])],
                object=entity_name(int(objects[i])),
                doc_id=doc_id,
                chunk_id=f"{doc_id}#{(i % per_doc) // TRIPLES_PER_CHUNK}",
                source="extracted",
            )
        )
    graph = KnowledgeGraph(folder, RandomEmbedder(seed=size), autosave=False)
    graph.replace_documents(documents)
    return graph


def make_questions(
    graph: KnowledgeGraph, count: int, rng: np.random.Generator
) -> list[tuple[str, np.ndarray, list[tuple[str, str]]]]:
    snap = graph.snapshot
    chunks = sorted((doc, chunk) for doc, chunk in snap.chunks.chunk_keys() if chunk is not None)
    questions = []
    for _ in range(count):
        edge = int(rng.integers(snap.edge_count))
        subject = int(snap.edge_subject[edge])
        text = f"How is {snap.node_names[subject]} related to the rest of the system?"
        vector = (
            snap.edge_vectors[edge]
            + snap.node_vectors[subject]
            + 0.8 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
        )
        vector = (vector / np.linalg.norm(vector)).astype(np.float32)
        own_chunk = (snap.edge_doc[edge], str(snap.edge_chunk[edge]))
        others = [chunks[int(i)] for i in rng.integers(len(chunks), size=2)]
        questions.append((text, vector, [own_chunk, *others]))
    return questions


@dataclass(frozen=True)
class SubgraphBench:
    """One graph size: its build time and ``select``'s latency over the questions."""

    triples: int
    nodes: int
    build_s: float
    p50_ms: float
    p99_ms: float
    mean_triples: float  # triples returned per question


def bench(size: int, count: int, min_score: float | None, path_aware: bool = True) -> SubgraphBench:
    rng = np.random.default_rng(size)
    with bench_dir() as folder:
        started = time.perf_counter()
        graph = build_graph(Path(folder), size, rng)
        build_s = time.perf_counter() - started
        selector = SubgraphSelector(graph, path_weights=DEFAULT_WEIGHTS if path_aware else None)
        if min_score is not None:
            selector.min_score = min_score
        gc.collect()  # the build's garbage should not be collected inside a timed call
        questions = make_questions(graph, count, rng)
        for text, vector, passages in questions[:20]:  # warm caches and lazy loads
            selector.select(text, vector, passages)
        latencies = []
        returned = 0
        for text, vector, passages in questions:
            t0 = time.perf_counter()
            result = selector.select(text, vector, passages)
            latencies.append((time.perf_counter() - t0) * 1000)
            returned += len(result)
        latencies.sort()
        return SubgraphBench(
            triples=graph.edge_count,
            nodes=graph.node_count,
            build_s=build_s,
            p50_ms=statistics.median(latencies),
            p99_ms=latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            mean_triples=returned / len(questions),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument(
        "--min-score",
        type=float,
        default=None,
        help="override the selector's min_score (e.g. -1 to always rank and return 3 triples)",
    )
    parser.add_argument(
        "--plain", action="store_true", help="rank triples by score alone (no kg.paths)"
    )
    args = parser.parse_args()
    print(f"BLAS threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'default')}")
    print(f"{'triples':>8} {'nodes':>7} {'build s':>8} {'p50 ms':>7} {'p99 ms':>7} {'avg k':>6}")
    for size in args.sizes:
        r = bench(size, args.questions, args.min_score, path_aware=not args.plain)
        print(
            f"{r.triples:>8} {r.nodes:>7} {r.build_s:>8.1f} {r.p50_ms:>7.2f} "
            f"{r.p99_ms:>7.2f} {r.mean_triples:>6.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
