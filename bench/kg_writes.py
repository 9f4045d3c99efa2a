"""What one document's change costs the knowledge graph as the graph grows.

Builds the synthetic graphs of ``bench.kg_subgraph`` (10 triples per chunk, 5 chunks per
document, random unit vectors), saves each, opens it again as the service does (that
open is timed: it is the graph's share of a start), then replaces one document's 50
triples with new ones, several times: first on the graph opened from its rows (as after
a crash), then, after a clean close, on the snapshot read back (as after a clean stop,
the path a service's changes usually take). Each change is split into the in-memory snapshot
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
    """One graph size and one kind of start: its open time and one document's change,
    median over the changes."""

    triples: int
    start: str  # "rows" (as after a crash) or "snapshot" (read back after a clean stop)
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


def measure(size: int, changes: int) -> list[GraphWrites]:
    """The graph of ``size`` triples opened from its rows, ``changes`` changes, a clean
    close (which saves the snapshot), then opened again from the snapshot and changed as
    many times: a service's changes after a crash's start and after a clean stop's."""
    rng = np.random.default_rng(size)
    results = []
    with bench_dir() as folder:
        build_graph(folder, size, rng).save()
        for start, round_ in (("rows", 0), ("snapshot", changes)):
            started = time.perf_counter()
            graph = KnowledgeGraph(folder, RandomEmbedder(seed=1))
            open_s = time.perf_counter() - started
            totals, snapshots = changed(graph, range(round_, round_ + changes), rng)
            graph.close()
            folder_mb = sum(p.stat().st_size for p in Path(folder).iterdir()) / 2**20
            rest = statistics.median(t - s for t, s in zip(totals, snapshots, strict=True))
            results.append(
                GraphWrites(
                    triples=size,
                    start=start,
                    folder_mb=round(folder_mb, 1),
                    open_s=round(open_s, 2),
                    change_ms=round(statistics.median(totals) * 1000, 1),
                    snapshot_ms=round(statistics.median(snapshots) * 1000, 1),
                    rest_ms=round(rest * 1000, 1),
                )
            )
    return results


def changed(
    graph: KnowledgeGraph, rounds: range, rng: np.random.Generator
) -> tuple[list[float], list[float]]:
    """Seconds of each round's change of one document, and of its snapshot patch."""
    totals: list[float] = []
    snapshots: list[float] = []
    seconds: list[float] = []
    apply = GraphSnapshot.apply
    GraphSnapshot.apply = timed_apply(seconds)  # type: ignore[method-assign]
    try:
        for round_ in rounds:
            documents = {"doc0": changed_document("doc0", round_, rng)}
            seconds.clear()
            started = time.perf_counter()
            graph.replace_documents(documents)
            totals.append(time.perf_counter() - started)
            snapshots.append(sum(seconds))
    finally:
        GraphSnapshot.apply = apply  # type: ignore[method-assign]
    return totals, snapshots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--changes", type=int, default=5)
    args = parser.parse_args()
    for size in args.sizes:
        for row in measure(size, args.changes):
            print(json.dumps(asdict(row)), flush=True)


if __name__ == "__main__":
    main()
