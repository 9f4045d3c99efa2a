"""The embedded default's vector index: a Qdrant Edge shard in a child process.

Qdrant Edge keeps Qdrant's data model (points, payloads, cosine HNSW) in-process, so
the embedded mode and a Qdrant server stay one design; ``bench/embedded_index.py``
measured it at 2.2 ms p50 at 100k chunks against 383 ms for Qdrant local mode, which
searches by brute force and reads its whole store into memory on open.

The shard lives in a child process (``rag.knowledge.edge_worker`` says why: the
binding holds the GIL through an HNSW build). One worker owns it; every call is a
pickled request to it over a pipe (``rag.knowledge.pipe_worker``), so calls are
serialized and a search waits while a build runs
(the build's length: a few seconds per segment of the indexing threshold). A worker
that dies is started again on the next call; the call that saw it die fails with
``VectorIndexError``, which the knowledge base handles like any other store failure.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core.schema import BaseNode
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from rag.knowledge import edge_worker as worker
from rag.knowledge.pipe_worker import PipeWorker, WorkerStopped
from rag.knowledge.vectors import Hit, Payload, node_of, payload_of

log = logging.getLogger(__name__)

T = TypeVar("T")
#: Points per request to the worker: about 1.6 MB of vectors at 384 dimensions.
PAGE = 1024


class VectorIndexError(RuntimeError):
    """The vector index's process failed or stopped; the call did not happen."""


class EdgeIndex:
    """A Qdrant Edge shard at ``path``, created with the operator's HNSW settings."""

    def __init__(
        self,
        path: Path,
        size: int,
        *,
        hnsw_m: int = 16,
        hnsw_ef_construct: int = 100,
        indexing_kb: int | None = None,
        migrate_from: tuple[Path, str] | None = None,
    ) -> None:
        """``indexing_kb``: see ``edge_worker.open_shard``. ``migrate_from``: a Qdrant
        local-mode folder and collection that ``open`` moves into a shard not yet made
        (``migrate_local_mode``)."""
        self.path = path
        self._migrate_from = migrate_from
        self._init = (str(path), size, hnsw_m, hnsw_ef_construct, indexing_kb)
        self._process: PipeWorker | None = None
        self._opened = False
        self._lock = threading.Lock()

    # ----- the worker -----------------------------------------------------------

    def open(self) -> None:
        """Start the worker on the shard (made here on first open, from a local-mode
        folder where there is one)."""
        legacy = self._migrate_from
        if legacy is not None and legacy[0].is_dir() and not worker.has_shard(self.path):
            log.info("moving the vector index from local mode: %s to %s", legacy[0], self.path)
            moved = migrate_local_mode(legacy[0], self, legacy[1], _log_progress)
            log.info("vector index moved: %d points; the old folder is kept as *.migrated", moved)
        with self._lock:
            self._opened = True
        self._worker()  # a shard that cannot load fails here, with its own error

    def _worker(self) -> PipeWorker:
        """The running worker, started (and the shard loaded in it) where there is none."""
        with self._lock:
            if not self._opened:
                raise RuntimeError("the vector index is not open yet")
            if self._process is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._process = PipeWorker(worker.open_shard, *self._init)
            return self._process

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        process = self._worker()
        try:
            return process.call(fn, *args)
        except WorkerStopped as exc:
            with self._lock:
                if self._process is process:  # the next call starts a new one
                    log.error("the vector index's process stopped; it starts again on next use")
                    self._process = None
            process.kill()
            raise VectorIndexError(f"the vector index's process stopped ({exc})") from exc

    def close(self) -> None:
        with self._lock:
            process, self._process, self._opened = self._process, None, False
        if process is not None:
            try:
                process.call(worker.close)
            except WorkerStopped:
                log.warning("the vector index's process had stopped before close")
            process.close()

    # ----- VectorIndex ----------------------------------------------------------

    def beside(self, path: Path) -> EdgeIndex:
        """An index with this one's settings at another path."""
        _, size, hnsw_m, ef_construct, indexing_kb = self._init
        return EdgeIndex(
            path, size, hnsw_m=hnsw_m, hnsw_ef_construct=ef_construct, indexing_kb=indexing_kb
        )

    def exists(self) -> bool:
        return self._opened

    def add(self, nodes: Sequence[BaseNode]) -> None:
        rows = [(n.node_id, list(n.get_embedding()), payload_of(n)) for n in nodes]
        for start in range(0, len(rows), PAGE):
            self._call(worker.upsert, rows[start : start + PAGE])

    def delete(self, point_ids: Sequence[str]) -> None:
        for start in range(0, len(point_ids), PAGE):
            self._call(worker.delete, list(point_ids[start : start + PAGE]))

    def search(self, embedding: Sequence[float], top_k: int, where: qm.Filter | None) -> list[Hit]:
        if where is not None:
            raise ValueError("an embedded index has no shared-collection filter")
        found = self._call(worker.search, [float(x) for x in embedding], top_k)
        return [Hit(node_of(payload), score) for _, score, payload in found]

    def payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, Payload]]:
        for point_id, payload, _ in self._pages(list(keys), vectors=False):
            yield point_id, payload

    def _pages(
        self, keys: list[str] | None, vectors: bool
    ) -> Iterator[tuple[str, Payload, list[float] | None]]:
        offset: str | None = None
        while True:
            rows, offset = self._call(worker.scroll, offset, PAGE, keys, vectors)
            yield from rows
            if offset is None:
                return

    def count(self, where: qm.Filter | None = None) -> int:
        return self._call(worker.count)

    def optimize(self) -> None:
        if self._call(worker.optimize):
            log.info("vector index: built HNSW on the newest segment")

    def rss_bytes(self) -> int:
        """The index process's resident memory."""
        return self._call(worker.rss_bytes)

    def upsert_rows(self, rows: list[worker.PointRow]) -> None:
        """Points as they are (id, vector, payload): what a migration copies."""
        self._call(worker.upsert, rows)


def migrate_local_mode(
    local: Path, target: EdgeIndex, collection: str, progress: Callable[[int, int], None]
) -> int:
    """Copy a Qdrant local-mode folder's collection into a new Edge shard, once.

    The shard is built beside the target and renamed into place only when every point
    is in it, so a crash part-way leaves the local folder as the only store, and the
    next start begins again. The local folder is then renamed ``<name>.migrated``, not
    deleted: the operator removes it once satisfied. Returns how many points moved.
    """
    staging = target.path.with_name(target.path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    client = QdrantClient(path=str(local))
    moved = 0
    try:
        if client.collection_exists(collection):
            moved = _copy_points(client, collection, target.beside(staging), progress)
            staging.rename(target.path)
    finally:
        client.close()
    local.rename(local.with_name(local.name + ".migrated"))
    return moved


def _copy_points(
    client: QdrantClient,
    collection: str,
    building: EdgeIndex,
    progress: Callable[[int, int], None],
) -> int:
    total = int(client.count(collection, exact=True).count)
    building.open()
    try:
        moved, offset = 0, None
        while True:
            points, offset = client.scroll(
                collection, limit=PAGE, offset=offset, with_payload=True, with_vectors=True
            )
            rows = [(str(p.id), _dense(p.vector), dict(p.payload or {})) for p in points]
            building.upsert_rows(rows)
            moved += len(points)
            progress(moved, total)
            if offset is None:
                break
        building.optimize()
    finally:
        building.close()
    return moved


def _log_progress(done: int, total: int) -> None:
    if done == total or done % (PAGE * 16) == 0:
        log.info("moving the vector index: %d of %d points", done, total)


def _dense(vector: object) -> list[float]:
    """A local-mode point's one unnamed vector."""
    if not isinstance(vector, list):
        raise ValueError(f"a point without one unnamed dense vector: {type(vector).__name__}")
    return [float(x) for x in vector]
