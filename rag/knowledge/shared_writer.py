"""This instance's side of a collection on a Qdrant server: its id, the writer's
lease, reading the committed points, and cleaning up only its own leftovers.

``KnowledgeBase`` keeps the docstore; this class keeps everything about sharing
the collection with others, so the embedded default's write path stays as it is.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from pathlib import Path

from llama_index.core.schema import BaseNode
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from durable import atomic_write
from rag.knowledge import collection as points
from rag.knowledge.collection import CollectionScan, SharedCollection
from rag.knowledge.embedding import EMBEDDING_DIM
from rag.knowledge.lease import CollectionLease, CollectionLeasedError

log = logging.getLogger(__name__)


class SharedWriter:
    """Owns the lease and the point-level protocol of ``rag.knowledge.collection`` for one
    instance."""

    def __init__(
        self, client: QdrantClient, collection: str, config: SharedCollection, data_dir: Path
    ) -> None:
        self._client = client
        self._collection = collection
        self._config = config
        self._data_dir = data_dir
        self.writer_id = config.writer_id or ""
        self._lease: CollectionLease | None = None

    def open(self) -> CollectionScan:
        """Create the collection if needed, take the lease if it is free (else stay
        read-only), and read what the collection holds."""
        self.writer_id = self._config.writer_id or self._read_writer_id()
        points.ensure_collection(
            self._client,
            self._collection,
            EMBEDDING_DIM,
            hnsw_m=self._config.hnsw_m,
            hnsw_ef_construct=self._config.hnsw_ef_construct,
        )
        self._lease = CollectionLease(
            self._client,
            self._collection,
            holder=self.writer_id,
            name=self._config.writer_name,
            vector_size=EMBEDDING_DIM,
            ttl_s=self._config.lease_ttl_s,
        )
        try:
            self._lease.acquire()
        except CollectionLeasedError as exc:
            log.warning("%s", exc)
        self._lease.start_renewing()
        found = self.scan()
        others = {w: len(ids) for w, ids in found.pending_by_writer.items() if w != self.writer_id}
        if others:
            log.warning("unfinished writes of other instances stay hidden, untouched: %s", others)
        if found.foreign_points:
            log.info("%d points without a document id are left alone", found.foreign_points)
        return found

    def _read_writer_id(self) -> str:
        """This data folder's id on a shared collection, made once and kept."""
        path = self._data_dir / "writer_id"
        if not path.exists():
            writer_id = uuid.uuid4().hex
            atomic_write(path, lambda fh: fh.write(writer_id.encode()))
        return path.read_text(encoding="utf-8").strip()

    def scan(self) -> CollectionScan:
        return points.scan(self._client, self._collection)

    @property
    def writable(self) -> bool:
        return self._lease is not None and self._lease.held

    def require(self) -> CollectionScan | None:
        """Before a write: the lease, taken now if it lapsed (then a fresh scan, since
        the last holder may have written), or ``CollectionLeasedError``."""
        if self._lease is None:
            raise RuntimeError("the shared collection is not open yet")
        if self._lease.held:
            return None
        self._lease.acquire()
        return self.scan()

    def mark_pending(self, nodes: Sequence[BaseNode], triples: dict[str, list[list[str]]]) -> None:
        points.mark_pending(nodes, self.writer_id, triples)

    def commit(self, point_ids: Sequence[str]) -> None:
        """Make a write's chunks visible, if we still hold the lease."""
        assert self._lease is not None
        if not self._lease.renew():  # another instance took over while we embedded
            raise CollectionLeasedError(self._collection, self._lease.current())
        points.commit(self._client, self._collection, point_ids)

    def delete_document(self, doc_id: str) -> None:
        """Remove one document's committed chunks (another writer's pending ones stay)."""
        selector = qm.FilterSelector(
            filter=qm.Filter(
                must=[qm.FieldCondition(key=points.DOC_ID_KEY, match=qm.MatchValue(value=doc_id))],
                must_not=[
                    qm.FieldCondition(
                        key=points.STATE_KEY, match=qm.MatchValue(value=points.PENDING)
                    )
                ],
            )
        )
        self._client.delete(self._collection, points_selector=selector)

    def remove_own_leftovers(self) -> int:
        """Delete this instance's unfinished writes (only while it holds the lease)."""
        if not self.writable:
            return 0
        leftovers = self.scan().own_leftovers(self.writer_id)
        if leftovers:
            log.warning(
                "reconcile: removing %d chunks of this instance's unfinished writes", len(leftovers)
            )
            self._client.delete(self._collection, points_selector=qm.PointIdsList(points=leftovers))
        return len(leftovers)

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()
