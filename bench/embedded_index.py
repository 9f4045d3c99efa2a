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
import pickle
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import qdrant_edge as qe
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.local.persistence import STORAGE_FILE_NAME, CollectionPersistence

from bench.measure import percentile

DIM = 384
CLUSTERS = 1000
NOISE = 0.036  # per dimension: noise norm ~0.7, cosine to the cluster centre ~0.82
TOP_K = 10
BATCH = 1000
LOCAL_MAX = 100_000  # largest size local mode is measured at
LOCAL_TIMED = 3000  # points local mode inserts through upsert (see the module doc)
#: Search time allowed per store, size and filter setting: local mode's filtered search takes
#: seconds a query at 100k, so it gets fewer than the requested queries (``*_queries`` says).
SEARCH_BUDGET_S = 90.0
MIN_QUERIES = 5
HNSW_M, HNSW_EF_CONSTRUCT = 16, 100  # rag.knowledge.collection.SharedCollection's defaults
DOC_ID, STATE, PENDING = "doc_id", "warmrag_state", "pending"
REPO = Path(__file__).resolve().parent.parent
Log = Callable[[str], None]


def point_id(i: int) -> str:
    """UUID strings, as llama-index's node ids are."""
    return str(uuid.UUID(int=i + 1))


def payload(i: int) -> dict[str, Any]:
    """A chunk's payload; every 1000th has no document id, every 50th is pending."""
    if i % 1000 == 999:
        return {"note": "not a chunk"}
    body: dict[str, Any] = {DOC_ID: f"doc-{i // 8}", "doc_hash": f"h{i // 8}", "chunk": i % 8}
    if i % 50 == 7:
        body[STATE] = PENDING
    return body


def visible(n: int) -> np.ndarray:
    """Which of the first ``n`` points the filter lets through."""
    i = np.arange(n)
    return (i % 1000 != 999) & (i % 50 != 7)


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


class Store(Protocol):
    """The few operations the measurement needs, over one store's own API."""

    timed_points: int  # inserts from this point on are bulk-filled, not timed

    def insert(self, vectors: np.ndarray, start: int) -> None: ...
    def finish(self) -> float: ...  # index build after the inserts: seconds
    def search(self, query: np.ndarray, filtered: bool) -> list[int]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


class LocalStore:
    """qdrant-client local mode on a folder, as warmrag's embedded default opens it."""

    timed_points = LOCAL_TIMED

    def __init__(self, folder: Path, create: bool = True) -> None:
        self.folder, self.bulk = folder, False
        self.client = QdrantClient(path=str(folder))
        if create:
            params = qm.VectorParams(size=DIM, distance=qm.Distance.COSINE)
            self.client.create_collection("bench", vectors_config=params)
        self.filter = qm.Filter(
            must_not=[
                qm.IsEmptyCondition(is_empty=qm.PayloadField(key=DOC_ID)),
                qm.FieldCondition(key=STATE, match=qm.MatchValue(value=PENDING)),
            ]
        )

    def insert(self, vectors: np.ndarray, start: int) -> None:
        points = [
            qm.PointStruct(id=point_id(start + k), vector=v.tolist(), payload=payload(start + k))
            for k, v in enumerate(vectors)
        ]
        if start < self.timed_points:
            self.client.upsert("bench", points=points)
            return
        if not self.bulk:
            self.client.close()  # its lock on the folder; reopened by ``finish``
            self.bulk = True
        rows = [
            (CollectionPersistence.encode_key(p.id), pickle.dumps(p))  # as ``persist`` stores
            for p in points
        ]
        with sqlite3.connect(self.folder / "collection" / "bench" / STORAGE_FILE_NAME) as db:
            db.executemany("INSERT OR REPLACE INTO points VALUES (?, ?)", rows)

    def finish(self) -> float:
        if self.bulk:
            self.client = QdrantClient(path=str(self.folder))
        return 0.0  # local mode has no index to build

    def search(self, query: np.ndarray, filtered: bool) -> list[int]:
        hits = self.client.query_points(
            "bench", query=query.tolist(), query_filter=self.filter if filtered else None,
            limit=TOP_K, with_payload=True,
        ).points  # fmt: skip
        return [uuid.UUID(str(h.id)).int - 1 for h in hits]

    def count(self) -> int:
        return self.client.count("bench", exact=True).count

    def close(self) -> None:
        self.client.close()


class EdgeStore:
    """A Qdrant Edge shard on a folder: HNSW (warmrag's m/ef_construct), keyword indexes on
    the filtered keys, as ``rag.knowledge.collection.ensure_collection`` makes them on a server."""

    timed_points = 1 << 62

    def __init__(self, folder: Path, create: bool = True) -> None:
        if create:
            config = qe.EdgeConfig(
                vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine),
                hnsw_config=qe.HnswIndexConfig(
                    m=HNSW_M, ef_construct=HNSW_EF_CONSTRUCT, full_scan_threshold=10_000
                ),
            )
            self.shard = qe.EdgeShard.create(str(folder), config)
            for key in (DOC_ID, STATE):
                self.shard.update(
                    qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword)
                )
        else:
            self.shard = qe.EdgeShard.load(str(folder))
        self.filter = qe.Filter(
            must_not=[
                qe.IsEmptyCondition(DOC_ID),
                qe.FieldCondition(STATE, match=qe.MatchValue(PENDING)),
            ]
        )

    def insert(self, vectors: np.ndarray, start: int) -> None:
        points = [
            qe.Point(point_id(start + k), v, payload(start + k)) for k, v in enumerate(vectors)
        ]
        self.shard.update(qe.UpdateOperation.upsert_points(points))

    def finish(self) -> float:
        t0 = time.perf_counter()
        self.shard.optimize()  # synchronous: builds HNSW on segments past the threshold
        self.shard.flush()
        return time.perf_counter() - t0

    def search(self, query: np.ndarray, filtered: bool) -> list[int]:
        request = qe.QueryRequest(
            query=qe.Query.Nearest(query.tolist()),
            filter=self.filter if filtered else None,
            limit=TOP_K,
            with_payload=True,
        )
        return [uuid.UUID(str(h.id)).int - 1 for h in self.shard.query(request)]

    def count(self) -> int:
        return self.shard.count(qe.CountRequest(exact=True))

    def close(self) -> None:
        self.shard.close()


STORES: dict[str, Callable[[Path, bool], Store]] = {"local": LocalStore, "edge": EdgeStore}


def measure(name: str, folder: Path, vectors: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
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
    row: dict[str, Any] = {"store": name, "size": n, "extrapolated": False}
    row["insert_per_s"] = round(timed / (upsert_s + index_s))
    row["timed_inserts"] = timed
    row["index_s"] = round(index_s, 2)
    if isinstance(store, EdgeStore):
        row["indexed_vectors"] = store.shard.info().indexed_vectors_count
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
    row["filtered_queries"], row["nofilter_queries"] = len(ms[True]), len(ms[False])
    row["p50_ms"] = round(statistics.median(ms[True]), 3)
    row["p99_ms"] = round(percentile(ms[True], 99), 3)
    row["p50_nofilter_ms"] = round(statistics.median(ms[False]), 3)
    hit = sum(len(truth[q] & set(ids)) for q, ids in enumerate(found))
    row["recall_at_10"] = round(hit / (TOP_K * len(found)), 4)
    row["rss_mb"] = round(rss_mb() - rss0)
    store.close()
    t0 = time.perf_counter()
    store = STORES[name](folder, False)
    row["reopen_s"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    store.search(queries[0], False)
    row["first_query_ms"] = round((time.perf_counter() - t1) * 1000, 2)
    assert store.count() == n, "the reopened folder lost points"
    store.close()
    return row


def run_embedded_index(
    sizes: list[int], work_dir: Path, log: Log, queries: int = 200, stores: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Each store (all by default) at every size; local mode up to ``LOCAL_MAX``, and
    extrapolated linearly past it when this run measured it at ``LOCAL_MAX``."""
    rows: list[dict[str, Any]] = []
    for n in sizes:
        vectors, qs = dataset(n, queries)
        for name in stores or tuple(STORES):
            if name == "local" and n > LOCAL_MAX:
                base = [r for r in rows if r["store"] == "local" and r["size"] == LOCAL_MAX]
                if base:
                    scale = n / LOCAL_MAX
                    keys = ("p50_ms", "p99_ms", "p50_nofilter_ms", "reopen_s")
                    row = {k: round(base[0][k] * scale, 1) for k in keys}
                    rows.append({"store": name, "size": n, "extrapolated": True, **row})
                continue
            folder = work_dir / f"{name}-{n}"
            rows.append(measure(name, folder, vectors, qs))
            shutil.rmtree(folder, ignore_errors=True)
            log(format_row(rows[-1]))
        del vectors
    return {"dim": DIM, "clusters": CLUSTERS, "queries": queries, "top_k": TOP_K, "rows": rows}


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


def format_row(row: dict[str, Any]) -> str:
    cells = [str(row.get(key, "-")) for key in COLUMNS]
    return " | ".join(cells) + (" (extrapolated)" if row.get("extrapolated") else "")


def iter_table(result: dict[str, Any]) -> Iterator[str]:
    yield " | ".join(COLUMNS)
    for row in result["rows"]:
        yield format_row(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--stores", default=",".join(STORES), help="local, edge or both")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    (REPO / "data").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "data", prefix="bench-edge-") as work:
        stores = tuple(args.stores.split(","))
        result = run_embedded_index(sizes, Path(work), print, args.queries, stores)
    print("\n".join(iter_table(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
