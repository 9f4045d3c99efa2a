"""Embedded vector stores at 10k / 100k / 1M chunks: Qdrant local mode next to Qdrant Edge.

Retrieval sits inside every TTFT, and local mode (qdrant-client with ``path=``) scores every
point with numpy on each query. Qdrant Edge (``qdrant-edge-py``) is Qdrant's own engine in
process, with HNSW and payload indexes. For each store and size this measures insert
throughput (Edge: upserts, then the blocking ``optimize`` that builds HNSW), search p50/p99 of
top-10 queries under warmrag's shared-mode filter
(``rag.knowledge.collection.visible_chunks``: a document
id, not pending) and without a filter (the embedded default's query), recall@10 of the filtered
search against exact numpy search, the time to reopen the folder (a restart) and its first
query, and the process's RSS growth.

Vectors are 384-d (all-MiniLM-L6-v2's size), normalized, drawn around 1,000 gaussian cluster
centres, with queries drawn around the same centres: uniform random vectors would make HNSW
look worse than on real embeddings. 2% of points carry ``warmrag_state: pending`` and 0.1% no
document id, so the filter excludes something.

Local mode commits one SQLite transaction per point (60-400 points/s here), so only its first
``LOCAL_TIMED`` points go through ``upsert`` and give its insert rate; the rest are written
straight into its SQLite file in one transaction, in its own format, and the folder is reopened
so the searches run on what local mode loaded. It stops at 100k (1M would also search 1.5 GB with
numpy per query); its 1M row is extrapolated linearly from 100k and marked so.

    .venv/bin/python -m bench.embedded_index [--sizes 10000,100000,1000000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from bench.index_stores import DIM, STORES, TOP_K, EdgeStore, reopen, visible
from bench.measure import percentile
from bench.paths import bench_dir
from bench.scale_records import EmbeddedIndexResult, IndexRow

CLUSTERS = 1000
NOISE = 0.036  # per dimension: noise norm ~0.7, cosine to the cluster centre ~0.82
BATCH = 1000
LOCAL_MAX = 100_000  # largest size local mode is measured at
#: Search time allowed per store, size and filter setting: local mode's filtered search takes
#: seconds a query at 100k, so it gets fewer than the requested queries (``*_queries`` says).
SEARCH_BUDGET_S = 90.0
MIN_QUERIES = 5
Log = Callable[[str], None]


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def dataset(n: int, queries: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``n`` clustered unit vectors and ``queries`` query vectors near the same centres."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((CLUSTERS, DIM)))
    vectors = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):
        rows = min(100_000, n - start)
        noise = rng.standard_normal((rows, DIM), dtype=np.float32) * NOISE
        vectors[start : start + rows] = unit(centres[rng.integers(CLUSTERS, size=rows)] + noise)
    q_noise = rng.standard_normal((queries, DIM), dtype=np.float32) * NOISE
    return vectors, unit(centres[rng.integers(CLUSTERS, size=queries)] + q_noise)


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, mask: np.ndarray) -> list[set[int]]:
    """Brute-force top-k row indexes per query among the rows ``mask`` lets through."""
    best_s = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(vectors), 100_000):
        scores = queries @ vectors[start : start + 100_000].T
        scores[:, ~mask[start : start + 100_000]] = -np.inf
        idx = np.argpartition(-scores, TOP_K, axis=1)[:, :TOP_K]
        best_s = np.hstack([best_s, np.take_along_axis(scores, idx, axis=1)])
        best_i = np.hstack([best_i, idx + start])
        keep = np.argsort(-best_s, axis=1)[:, :TOP_K]
        best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
    return [set(row.tolist()) for row in best_i]


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def measure(name: str, folder: Path, vectors: np.ndarray, queries: np.ndarray) -> IndexRow:
    """One store at one size, in a fresh folder."""
    n = len(vectors)
    truth = exact_top_k(vectors, queries, visible(n))
    rss0 = rss_mb()
    t0 = time.perf_counter()
    store = STORES[name](folder, True)
    timed = min(n, store.timed_points)
    for start in range(0, n, BATCH):
        store.insert(vectors[start : start + BATCH], start)
        if start + BATCH == timed:
            upsert_s = time.perf_counter() - t0
    if timed == n:
        upsert_s = time.perf_counter() - t0
    index_s = store.finish()
    indexed = store.shard.info().indexed_vectors_count if isinstance(store, EdgeStore) else None
    for query in queries[:2]:  # warm-up
        store.search(query, False)
    ms: dict[bool, list[float]] = {True: [], False: []}
    found = []
    for filtered in (True, False):
        t0 = time.perf_counter()
        for k, query in enumerate(queries):
            if k >= MIN_QUERIES and time.perf_counter() - t0 > SEARCH_BUDGET_S:
                break
            t1 = time.perf_counter()
            hits = store.search(query, filtered)
            ms[filtered].append((time.perf_counter() - t1) * 1000)
            if filtered:
                found.append(hits)
    hit = sum(len(truth[q] & set(ids)) for q, ids in enumerate(found))
    rss = round(rss_mb() - rss0)
    before = store.search(queries[0], False)
    store.close()
    reopened = reopen(name, folder, queries[0])
    assert reopened.points == n, "the reopened folder lost points"
    assert reopened.first_hits == before, "the reopened folder answers differently"
    row = IndexRow(
        store=name,
        size=n,
        extrapolated=False,
        insert_per_s=round(timed / (upsert_s + index_s)),
        timed_inserts=timed,
        index_s=round(index_s, 2),
        filtered_queries=len(ms[True]),
        nofilter_queries=len(ms[False]),
        p50_ms=round(statistics.median(ms[True]), 3),
        p99_ms=round(percentile(ms[True], 99), 3),
        p50_nofilter_ms=round(statistics.median(ms[False]), 3),
        recall_at_10=round(hit / (TOP_K * len(found)), 4),
        rss_mb=rss,
        reopen_s=round(reopened.seconds, 3),
        first_query_ms=round(reopened.first_query_ms, 2),
    )
    # Qdrant Edge's alone: given for it only, so local mode's rows have no such key.
    return row if indexed is None else row.model_copy(update={"indexed_vectors": indexed})


def extrapolated(base: IndexRow, size: int) -> IndexRow:
    """``base``'s latencies and reopen time scaled linearly to ``size`` points."""
    scale = size / base.size
    return IndexRow(
        store=base.store,
        size=size,
        extrapolated=True,
        p50_ms=round(base.p50_ms * scale, 1),
        p99_ms=round(base.p99_ms * scale, 1),
        p50_nofilter_ms=round(base.p50_nofilter_ms * scale, 1),
        reopen_s=round(base.reopen_s * scale, 1),
    )


def run_embedded_index(
    sizes: list[int], work_dir: Path, log: Log, queries: int = 200, stores: tuple[str, ...] = ()
) -> EmbeddedIndexResult:
    """Each store (all by default) at every size; local mode up to ``LOCAL_MAX``, and
    extrapolated linearly past it when this run measured it at ``LOCAL_MAX``."""
    rows: list[IndexRow] = []
    for n in sizes:
        vectors, qs = dataset(n, queries)
        for name in stores or tuple(STORES):
            if name == "local" and n > LOCAL_MAX:
                base = [r for r in rows if r.store == "local" and r.size == LOCAL_MAX]
                if base:
                    rows.append(extrapolated(base[0], n))
                continue
            folder = work_dir / f"{name}-{n}"
            rows.append(measure(name, folder, vectors, qs))
            shutil.rmtree(folder, ignore_errors=True)
            log(format_row(rows[-1]))
        del vectors
    return EmbeddedIndexResult(dim=DIM, clusters=CLUSTERS, queries=queries, top_k=TOP_K, rows=rows)


COLUMNS = [
    "store",
    "size",
    "insert_per_s",
    "index_s",
    "p50_ms",
    "p99_ms",
    "filtered_queries",
    "p50_nofilter_ms",
    "recall_at_10",
    "reopen_s",
    "first_query_ms",
    "rss_mb",
]


def format_row(row: IndexRow) -> str:
    values = row.to_json()
    cells = [str(values.get(key, "-")) for key in COLUMNS]
    return " | ".join(cells) + (" (extrapolated)" if row.extrapolated else "")


def iter_table(result: EmbeddedIndexResult) -> Iterator[str]:
    yield " | ".join(COLUMNS)
    for row in result.rows:
        yield format_row(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--stores", default=",".join(STORES), help="local, edge or both")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with bench_dir(prefix="bench-edge-") as work:
        stores = tuple(args.stores.split(","))
        result = run_embedded_index(sizes, work, print, args.queries, stores)
    print("\n".join(iter_table(result)))
    if args.json:
        args.json.write_text(json.dumps(result.to_json(), indent=2))


if __name__ == "__main__":
    main()
