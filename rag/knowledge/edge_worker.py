"""The process that owns the Qdrant Edge shard (``rag.knowledge.edge`` starts it).

Edge's Python binding holds the GIL for the whole of each call, and building an HNSW
segment takes seconds (5.2 s for 9,000 chunks of 384 dimensions on this 2-core CPU):
in the service's process that would stop its event loop for as long. So the shard
lives in a child process of its own, and these functions are what the parent asks of
it. This module imports nothing but Qdrant Edge, so the child starts in well under a
second.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import qdrant_edge as qe

Payload = dict[str, Any]
PointRow = tuple[str, list[float], Payload]

_shard: qe.EdgeShard | None = None
#: How long a load waits for a shard another process still holds: a worker whose
#: service was killed leaves within ``PARENT_POLL_S`` of it; a live service holds it
#: for good, and the CLI's embedded mode says so after this wait.
HELD_WAIT_S = 3.0
PARENT_POLL_S = 0.2
#: Segments the optimizer keeps before it merges (Edge's "auto" is the CPU count: on
#: 2 cores every build merged everything into one segment, rebuilding HNSW on all of
#: it, 40 s at 40,000 chunks and growing). With 16, a build covers the newest
#: segment alone (about 6,500 chunks: 7-22 s here under load, 5 s idle).
SEGMENTS = 16
#: The largest segment a merge makes, in KB of vectors (about 65,000 chunks): bounds
#: the longest build, at some cost to search past a million chunks (more segments).
MAX_SEGMENT_KB = 100_000
#: HNSW's search width. Measured by the scale section at 100,000 chunks (near-duplicate
#: copies of 600 real ones, the hardest case for recall): Edge's default gave recall@10
#: 0.897 against exact search, 100 gave 0.922, 256 gives 0.968 at p50 3.0 ms (2.3 ms).
SEARCH_EF = 256
#: The shard's search pool (Edge's default: one thread per CPU). A search runs beside the
#: question's link to the graph (``rag.chat.retriever``), and a second search thread takes
#: the link's core. Measured side by side at 100,000 chunks (two services, one of each,
#: the same 300 questions asked of both in turn, three passes): 0.29-0.43 ms off each
#: retrieval (the paired differences' medians); alone, one thread searches as fast
#: (0.49-0.51 ms against 0.50-0.58 ms in-process, two segments).
SEARCH_THREADS = 1


def has_shard(path: Path) -> bool:
    """Whether ``path`` holds a shard (Edge writes its config first)."""
    return (path / "edge_config.json").exists()


def open_shard(
    path: str, size: int, hnsw_m: int, hnsw_ef_construct: int, indexing_kb: int | None
) -> None:
    """A new worker's first call: load the shard at ``path``, or create it there.
    ``indexing_kb``: vectors a segment holds before it gets HNSW (None: Qdrant's
    10,000 KB, about 6,500 chunks of 384 dimensions)."""
    global _shard
    _leave_with_parent()
    folder = Path(path)
    if has_shard(folder):
        _shard = _load(path, size)
        return
    _shard = qe.EdgeShard.create(path, shard_config(size, hnsw_m, hnsw_ef_construct, indexing_kb))


def shard_config(
    size: int, hnsw_m: int, hnsw_ef_construct: int, indexing_kb: int | None = None
) -> qe.EdgeConfig:
    """A new shard's settings: one cosine vector, HNSW, and the optimizer's bounds."""
    return qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=size, distance=qe.Distance.Cosine),
        # Below 10,000 KB of vectors a segment is searched exhaustively (Qdrant's default).
        hnsw_config=qe.HnswIndexConfig(
            m=hnsw_m, ef_construct=hnsw_ef_construct, full_scan_threshold=10_000
        ),
        max_search_threads=SEARCH_THREADS,
        optimizers=qe.EdgeOptimizersConfig(
            default_segment_number=SEGMENTS,
            max_segment_size=MAX_SEGMENT_KB,
            indexing_threshold=indexing_kb,
        ),
    )


def _load(path: str, size: int) -> qe.EdgeShard:
    """Load, waiting while another process (a killed service's worker) still holds it.
    A shard made before ``SEARCH_THREADS`` gets it (Edge writes it to the shard's config;
    what the config leaves out stays as the shard has it)."""
    threads = qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=size, distance=qe.Distance.Cosine),
        max_search_threads=SEARCH_THREADS,
    )
    deadline = time.monotonic() + HELD_WAIT_S
    while True:
        try:
            return qe.EdgeShard.load(path, threads)
        except Exception as exc:  # the binding raises a bare Exception
            if "WouldBlock" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the vector index at {path} is held by another process"
                ) from exc
            time.sleep(PARENT_POLL_S)


def _leave_with_parent() -> None:
    """Exit when the service that started this process is gone (killed, not closed):
    a worker left behind would hold the shard's lock against the next start."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="edge-parent-watch", daemon=True).start()


def _open() -> qe.EdgeShard:
    if _shard is None:
        raise RuntimeError("the Edge shard is not open")
    return _shard


def upsert(points: list[PointRow]) -> None:
    shard = _open()
    shard.update(qe.UpdateOperation.upsert_points([qe.Point(i, v, p) for i, v, p in points]))
    shard.flush()


def delete(point_ids: list[str]) -> None:
    shard = _open()
    shard.update(qe.UpdateOperation.delete_points(list(point_ids)))
    shard.flush()


def search(vector: list[float], limit: int) -> list[tuple[str, float, Payload]]:
    request = qe.QueryRequest(
        query=qe.Query.Nearest(vector),
        limit=limit,
        with_payload=True,
        params=qe.SearchParams(hnsw_ef=max(SEARCH_EF, limit)),
    )
    return [(str(h.id), float(h.score), dict(h.payload or {})) for h in _open().query(request)]


def scroll(
    offset: str | None, limit: int, keys: list[str] | None, vectors: bool
) -> tuple[list[tuple[str, Payload, list[float] | None]], str | None]:
    """One page of points: (id, payload or those keys of it, vector if asked)."""
    records, after = _open().scroll(
        qe.ScrollRequest(offset=offset, limit=limit, with_payload=True, with_vector=vectors)
    )
    rows = []
    for r in records:
        payload = dict(r.payload or {})
        if keys is not None:
            payload = {k: payload[k] for k in keys if k in payload}
        vector = None
        if vectors and isinstance(r.vector, list):  # the one unnamed dense vector
            vector = [float(x) for x in r.vector if not isinstance(x, list)]
        rows.append((str(r.id), payload, vector))
    return rows, None if after is None else str(after)


def rss_bytes() -> int:
    """This process's resident memory (the index's share of the service's)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def count() -> int:
    return int(_open().count(qe.CountRequest(exact=True)))


def optimize() -> bool:
    """Build HNSW on segments past the indexing threshold; blocks this process only."""
    shard = _open()
    built = bool(shard.optimize())
    shard.flush()
    return built


def close() -> None:
    global _shard
    if _shard is not None:
        _shard.flush()
        _shard.close()
        _shard = None
