"""What one document's change costs the knowledge graph as the graph grows.

Builds the synthetic graphs of ``bench.kg_subgraph`` (10 triples per chunk, 5 chunks per
document, random unit vectors), saves each, opens it again as the service does (that
open is timed: it is the graph's share of a start), then replaces one document's 50
triples with new ones, several times. Each change is split into the in-memory snapshot
patch (``GraphSnapshot.apply``, timed inside the change) and the rest (the edges
swapped in memory and the write to disk), so that what grows with the graph is visible.
The folder's size is reported beside it.

Run: ``.venv/bin/python -m bench.kg_writes [--sizes 10000 100000] [--changes 5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.kg_subgraph import RandomEmbedder, build_graph, entity_name
from bench.paths import bench_dir
from kg import KnowledgeGraph, Triple
from kg.index import GraphSnapshot


def timed_apply(seconds: list[float]) -> Callable[..., GraphSnapshot]:
    """``GraphSnapshot.apply``, adding its time to ``seconds`` (the store patches its
    snapshot once per change)."""
    apply = GraphSnapshot.apply

    def timed(snapshot: GraphSnapshot, *args: Any, **kwargs: Any) -> GraphSnapshot:
        started = time.perf_counter()
        try:
            return apply(snapshot, *args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    return timed


@dataclass(frozen=True)
class GraphWrites:
    """One graph size: its open time and one document's change, median over the changes."""

    triples: int
    folder_mb: float
    open_s: float
    change_ms: float
    snapshot_ms: float
    rest_ms: float


def changed_document(doc_id: str, round_: int, rng: np.random.Generator) -> list[Triple]:
    """50 triples for ``doc_id``, with entities and texts the graph has not seen."""
    return [
        Triple(
            subject=entity_name(int(rng.integers(10**6))) + f" r{round_}",
            predicate="uses",
            object=entity_name(int(rng.integers(10**6))),
            doc_id=doc_id,
            chunk_id=f"{doc_id}#{i // 10}",
            source="extracted",
        )
        for i in range(50)
    ]


def measure(size: int, changes: int) -> GraphWrites:
    rng = np.random.default_rng(size)
    with bench_dir() as folder:
        build_graph(folder, size, rng).save()
        started = time.perf_counter()
        graph = KnowledgeGraph(folder, RandomEmbedder(seed=1))
        open_s = time.perf_counter() - started
        totals: list[float] = []
        snapshots: list[float] = []
        seconds: list[float] = []
        apply = GraphSnapshot.apply
        GraphSnapshot.apply = timed_apply(seconds)  # type: ignore[method-assign]
        try:
            for round_ in range(changes):
                documents = {"doc0": changed_document("doc0", round_, rng)}
                seconds.clear()
                started = time.perf_counter()
                graph.replace_documents(documents)
                totals.append(time.perf_counter() - started)
                snapshots.append(sum(seconds))
        finally:
            GraphSnapshot.apply = apply  # type: ignore[method-assign]
        folder_mb = sum(p.stat().st_size for p in Path(folder).iterdir()) / 2**20
        change = statistics.median(totals)
        snapshot = statistics.median(snapshots)
        rest = statistics.median(t - s for t, s in zip(totals, snapshots, strict=True))
        return GraphWrites(
            triples=size,
            folder_mb=round(folder_mb, 1),
            open_s=round(open_s, 2),
            change_ms=round(change * 1000, 1),
            snapshot_ms=round(snapshot * 1000, 1),
            rest_ms=round(rest * 1000, 1),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--changes", type=int, default=5)
    args = parser.parse_args()
    for size in args.sizes:
        print(json.dumps(asdict(measure(size, args.changes))), flush=True)


if __name__ == "__main__":
    main()
