"""What the knowledge graph holds in memory, and what one change costs, at a size.

Builds the scale section's graph for ``--chunks`` chunks (``bench.scale_folder``'s: the
real corpus's 3.23 triples and 2.09 entities per chunk, random vectors), closes it
cleanly so its snapshot is saved, then measures in a fresh process what a service start
and its first changes do to the graph alone: the load (the snapshot read back), the
build of what changes edit, and ``--changes`` one-document changes with their writes.
RSS is the process's (after a ``gc.collect``) above what it held before the load;
``peak_mib`` is its high-water mark on the same footing. ``*_anon_mib`` is the part of
it that is the process's own memory (``RssAnon``): the rest is pages of files mapped
into it (the saved snapshot's vectors), which the kernel can drop and read again. Last,
``--queries`` fact selections (``bench.kg_subgraph``'s questions, each with its own
edge's chunk as a passage) show how much of the mapped vectors the reads page in, and
what a selection costs. Then, side by side, each pair of which must choose the same: the
entity link by embedding from the int8 codes against a float32 scan of every entity
vector (``kg.int8_rows``), and the selection with the triple vectors read from their file
against one reading them through its mapping (``kg.file_matrix``). The service's own
start is ``bench.scale_startup``; this isolates the graph, whose memory is what the 1M
target misses on.

Run: ``.venv/bin/python -m bench.kg_memory [--chunks 100000] [--changes 3] [--queries 200]
[--after-crash]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from bench.kg_subgraph import RandomEmbedder, make_questions
from bench.paths import REPO, bench_dir
from bench.scale_folder import build_graph
from bench.service_start import rss_mib
from kg import KnowledgeGraph, SubgraphSelector, Triple, snapshot_file
from kg.embeddings import normalize_rows
from kg.file_matrix import FileMatrix
from kg.paths import DEFAULT_WEIGHTS
from kg.row_matrix import RowMatrix
from kg.vector_rows import VectorRows

CHUNKS_PER_DOCUMENT = 10


@dataclass(frozen=True)
class GraphMemory:
    """The graph of one size, loaded as a start loads it, then changed."""

    chunks: int
    triples: int
    entities: int
    from_snapshot: bool
    mapped_at_load: bool
    load_s: float
    loaded_mib: int
    prepare_s: float
    prepared_mib: int
    change_s: list[float]
    changed_mib: int
    peak_mib: int
    loaded_anon_mib: int
    changed_anon_mib: int
    queries: int
    queried_mib: int
    queried_anon_mib: int
    select_p50_ms: float
    select_p99_ms: float
    link_p50_ms: float
    link_scan_p50_ms: float
    link_candidates_max: int
    #: Of the entities the float32 scan linked, the share the codes linked: 1.0 without
    #: cells (the choice is exact; anything else fails the bench), less with them.
    link_recall: float
    select_file_p50_ms: float
    select_mapped_p50_ms: float


def measure(
    folder: Path, changes: int, queries: int, after_crash: bool = False
) -> dict[str, object]:
    """Load, prepare and change the graph at ``folder`` in this process (a fresh one),
    then select facts for ``queries`` questions. ``after_crash``: the saved snapshot is
    removed first, so the load reads every row and vector as a start after a crash does."""
    if after_crash:
        snapshot_file.remove(folder)
    from_snapshot = (folder / snapshot_file.FILE).exists()
    gc.collect()
    own = rss_mib(os.getpid())
    own_anon = rss_mib(os.getpid(), "RssAnon")
    started = time.perf_counter()
    graph = KnowledgeGraph(folder, RandomEmbedder(seed=2), load=False)
    graph.load(prepare=False)  # the service's way: the first change builds the rest
    load_s = time.perf_counter() - started
    if graph.snapshot.node_vectors.matrix.codes is None:
        raise RuntimeError("the loaded snapshot has no int8 codes for its entities")
    edges = graph.snapshot.edge_vectors.matrix
    mapped_at_load = any(isinstance(part, FileMatrix) for part in (edges.base, edges.tail))
    gc.collect()
    loaded = rss_mib(os.getpid()) - own
    loaded_anon = rss_mib(os.getpid(), "RssAnon") - own_anon
    started = time.perf_counter()
    graph.prepare()
    graph.wait_prepared()
    prepare_s = time.perf_counter() - started
    gc.collect()
    prepared = rss_mib(os.getpid()) - own
    took: list[float] = []
    for i in range(changes):
        triple = Triple(
            subject=f"Bench entity {i}", predicate="uses", object="Bench tool", doc_id="doc-0"
        )
        started = time.perf_counter()
        graph.replace_documents({"doc-0": [triple]}, {"doc-0": f"changed-{i}"})
        took.append(round(time.perf_counter() - started, 3))
    gc.collect()
    changed = rss_mib(os.getpid()) - own
    changed_anon = rss_mib(os.getpid(), "RssAnon") - own_anon
    latencies = _select(graph, queries)
    gc.collect()
    queried = rss_mib(os.getpid()) - own
    queried_anon = rss_mib(os.getpid(), "RssAnon") - own_anon
    peak = rss_mib(os.getpid(), "VmHWM") - own
    link = _link_side_by_side(graph, queries)
    selections = _select_side_by_side(graph, queries)
    counts = (graph.edge_count, graph.node_count)
    graph.close()
    return {
        "triples": counts[0],
        "entities": counts[1],
        "from_snapshot": from_snapshot,
        "mapped_at_load": mapped_at_load,
        "load_s": round(load_s, 2),
        "loaded_mib": loaded,
        "prepare_s": round(prepare_s, 2),
        "prepared_mib": prepared,
        "change_s": took,
        "changed_mib": changed,
        "peak_mib": peak,
        "loaded_anon_mib": loaded_anon,
        "changed_anon_mib": changed_anon,
        "queries": queries,
        "queried_mib": queried,
        "queried_anon_mib": queried_anon,
        "select_p50_ms": round(float(np.percentile(latencies, 50)), 2) if queries else 0.0,
        "select_p99_ms": round(float(np.percentile(latencies, 99)), 2) if queries else 0.0,
        **link,
        **selections,
    }


def _select(graph: KnowledgeGraph, queries: int) -> list[float]:
    """Milliseconds of each of ``queries`` fact selections (the service's defaults)."""
    selector = SubgraphSelector(graph, path_weights=DEFAULT_WEIGHTS)
    latencies = []
    for text, vector, passages in make_questions(graph, queries, np.random.default_rng(5)):
        started = time.perf_counter()
        selector.select(text, vector, passages)
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def _link_side_by_side(graph: KnowledgeGraph, queries: int) -> dict[str, float | int]:
    """The entity link (by words and by embedding) per question: from the int8 codes (the
    selector's way) and, as the baseline, from a float32 scan of every entity vector,
    alternating; the two must choose the same entities where the entities have no cells
    (else the bench fails; with cells, ``kg.cells``, the codes read the nearest cells
    alone, and the share found is reported). Run after the RSS figures: the scan pages in
    every entity vector."""
    selector = SubgraphSelector(graph, path_weights=DEFAULT_WEIGHTS)
    snap = graph.snapshot
    coded = snap.node_vectors
    if coded.matrix.codes is None:
        raise RuntimeError("the entities' vectors have no int8 codes")
    scan = replace(snap, node_vectors=VectorRows(_without_codes(coded.matrix), coded.rows))
    took: dict[str, list[float]] = {"codes": [], "scan": []}
    widest = linked = found = 0
    cells = coded.matrix.rotation is not None and coded.matrix.rotation.cells is not None
    threshold, count = selector.similarity_threshold, selector.max_similar_nodes
    for text, vector, _ in make_questions(graph, queries, np.random.default_rng(5)):
        query = normalize_rows(vector)[0]
        chosen = {}
        for name, view in (("codes", snap), ("scan", scan)):
            started = time.perf_counter()
            chosen[name] = selector.link(text, query, (), view).similar
            took[name].append((time.perf_counter() - started) * 1000)
        linked += len(chosen["scan"])
        found += len(set(chosen["scan"]) & set(chosen["codes"]))
        if chosen["codes"] != chosen["scan"] and not cells:
            raise RuntimeError(f"the codes chose {chosen['codes']}, the scan {chosen['scan']}")
        items, _ = coded.candidates(query, threshold, count)
        widest = max(widest, len(items))
    return {
        "link_p50_ms": round(float(np.percentile(took["codes"], 50)), 2) if queries else 0.0,
        "link_scan_p50_ms": round(float(np.percentile(took["scan"], 50)), 2) if queries else 0.0,
        "link_candidates_max": widest,
        "link_recall": round(found / linked, 4) if linked else 1.0,
    }


def _select_side_by_side(graph: KnowledgeGraph, queries: int) -> dict[str, float]:
    """Each fact selection with the triple vectors' rows read from their file (the
    service's way, ``kg.file_matrix``) and, as the baseline, through the file's mapping,
    alternating which goes first; both must choose the same triples (else the bench
    fails). The questions are ``_select``'s, so both read rows the page cache holds: the
    cost of each way, not of the disk. Run after the RSS figures: the mapping's reads page
    the file into the process."""
    selector = SubgraphSelector(graph, path_weights=DEFAULT_WEIGHTS)
    snap = graph.snapshot
    edges = snap.edge_vectors
    # A view of the mapped part reads through the mapping (``FileMatrix.reads_file``).
    mapped_rows = RowMatrix(edges.matrix.base[:], edges.matrix.tail, edges.matrix.codes)
    mapped = replace(snap, edge_vectors=VectorRows(mapped_rows, edges.rows, edges.token))
    took: dict[str, list[float]] = {"file": [], "mapped": []}
    ways = [("file", snap), ("mapped", mapped)]
    for i, (text, vector, passages) in enumerate(
        make_questions(graph, queries, np.random.default_rng(5))
    ):
        chosen = {}
        for name, view in ways if i % 2 else ways[::-1]:
            started = time.perf_counter()
            chosen[name] = selector.select_with_reach(text, vector, passages, snap=view)[0]
            took[name].append((time.perf_counter() - started) * 1000)
        if chosen["file"] != chosen["mapped"]:
            raise RuntimeError(f"the file chose {chosen['file']}, the mapping {chosen['mapped']}")
    return {
        f"select_{name}_p50_ms": round(float(np.percentile(ms, 50)), 2) if queries else 0.0
        for name, ms in took.items()
    }


def _without_codes(matrix: RowMatrix) -> RowMatrix:
    """The same rows without their codes: what a scan of every float32 row reads."""
    return RowMatrix(matrix.base, matrix.tail)


def run(chunks: int, changes: int, queries: int = 200, after_crash: bool = False) -> GraphMemory:
    """Build the graph for ``chunks`` chunks, save it cleanly, measure it in a child
    (``after_crash``: without the saved snapshot)."""
    documents = {
        f"doc-{i}": (f"hash-{i}", CHUNKS_PER_DOCUMENT)
        for i in range(max(1, chunks // CHUNKS_PER_DOCUMENT))
    }
    with bench_dir() as work:
        build_graph(
            work,
            documents,
            keep_snapshot=True,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
        command = [sys.executable, "-m", "bench.kg_memory", "--measure", str(work / "kg")]
        child = subprocess.run(
            [*command, "--changes", str(changes), "--queries", str(queries)]
            + (["--after-crash"] if after_crash else []),
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        )
    return GraphMemory(chunks=chunks, **json.loads(child.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--changes", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--after-crash", action="store_true", help="start without the saved snapshot"
    )
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    if args.measure:
        measured = measure(args.measure, args.changes, args.queries, args.after_crash)
        print(json.dumps(measured), flush=True)
    else:
        result = run(args.chunks, args.changes, args.queries, args.after_crash)
        print(json.dumps(asdict(result)), flush=True)


if __name__ == "__main__":
    main()
