"""The two embedded vector stores ``bench.embedded_index`` compares, over their own APIs:
Qdrant local mode (qdrant-client with ``path=``, warmrag's embedded default) and a Qdrant
Edge shard; the points' ids and payloads, and what warmrag's filter lets through."""

from __future__ import annotations

import pickle
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import qdrant_edge as qe
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.local.persistence import STORAGE_FILE_NAME, CollectionPersistence

from rag.knowledge.edge_worker import SEARCH_EF, shard_config

DIM = 384
TOP_K = 10
LOCAL_TIMED = 3000  # points local mode inserts through upsert (``bench.embedded_index``'s doc)
HNSW_M, HNSW_EF_CONSTRUCT = 16, 100  # rag.knowledge.collection.SharedCollection's defaults
DOC_ID, STATE, PENDING = "doc_id", "warmrag_state", "pending"
#: A point's payload, in each store's own JSON form.
Payload = dict[str, str | int]


def point_id(i: int) -> str:
    """UUID strings, as llama-index's node ids are."""
    return str(uuid.UUID(int=i + 1))


def payload(i: int) -> Payload:
    """A chunk's payload; every 1000th has no document id, every 50th is pending."""
    if i % 1000 == 999:
        return {"note": "not a chunk"}
    body: Payload = {DOC_ID: f"doc-{i // 8}", "doc_hash": f"h{i // 8}", "chunk": i % 8}
    if i % 50 == 7:
        body[STATE] = PENDING
    return body


def visible(n: int) -> np.ndarray:
    """Which of the first ``n`` points the filter lets through."""
    i = np.arange(n)
    return (i % 1000 != 999) & (i % 50 != 7)


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
    """A Qdrant Edge shard on a folder, with the embedded default's settings
    (``rag.knowledge.edge_worker.shard_config``), and keyword indexes on the filtered keys,
    as ``rag.knowledge.collection.ensure_collection`` makes them on a server."""

    timed_points = 1 << 62

    def __init__(self, folder: Path, create: bool = True) -> None:
        if create:
            config = shard_config(DIM, HNSW_M, HNSW_EF_CONSTRUCT)  # as the product makes it
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
            params=qe.SearchParams(hnsw_ef=SEARCH_EF),  # as the product searches
        )
        return [uuid.UUID(str(h.id)).int - 1 for h in self.shard.query(request)]

    def count(self) -> int:
        return self.shard.count(qe.CountRequest(exact=True))

    def close(self) -> None:
        self.shard.close()


STORES: dict[str, Callable[[Path, bool], Store]] = {"local": LocalStore, "edge": EdgeStore}


@dataclass(frozen=True)
class Reopened:
    """A store's folder opened again, as after a restart: how long that and the first
    query took, the points it found and that query's hits (unfiltered)."""

    seconds: float
    first_query_ms: float
    points: int
    first_hits: list[int]


def reopen(name: str, folder: Path, query: np.ndarray) -> Reopened:
    t0 = time.perf_counter()
    store = STORES[name](folder, False)
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    hits = store.search(query, False)
    first_query_ms = (time.perf_counter() - t1) * 1000
    points = store.count()
    store.close()
    return Reopened(seconds, first_query_ms, points, hits)
