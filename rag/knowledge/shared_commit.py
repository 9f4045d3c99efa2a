"""Committing on a collection on a Qdrant server: this instance's side of sharing it.

Its id, the writer's lease, the point-level protocol of ``rag.knowledge.collection``
(a write's points pending until one ``set_payload`` commits them), reading the committed
points back into the docstore, and cleaning up only its own leftovers. Everything about
sharing the collection with others lives here, so the embedded default's write path
(``rag.knowledge.commit.EmbeddedCommit``) stays as it is.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from llama_index.core.schema import BaseNode
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from durable import atomic_write
from rag.knowledge import collection as points
from rag.knowledge.collection import CollectionScan, SharedCollection
from rag.knowledge.commit import CommitStrategy
from rag.knowledge.embedding import EMBEDDING_DIM
from rag.knowledge.faults import checkpoint
from rag.knowledge.lease import CollectionLease, CollectionLeasedError
from rag.knowledge.state import KBState, Triples
from rag.knowledge.vectors import QdrantIndex

log = logging.getLogger(__name__)


class SharedCommit(CommitStrategy):
    """On a server the committed points are the truth and the docstore file a cache of
    them; one instance at a time holds the writer's lease, the others read."""

    def __init__(self, config: SharedCollection) -> None:
        super().__init__()
        self._config = config
        self.writer_id = config.writer_id or ""
        self._lease: CollectionLease | None = None

    @property
    def client(self) -> QdrantClient:
        """A shared collection is on a server: its index is a ``QdrantIndex``."""
        index = self.index
        if not isinstance(index, QdrantIndex):
            raise TypeError(f"a shared collection is on a server, not {type(index).__name__}")
        return index.client

    def _start(self, cached: KBState) -> KBState:
        """Create the collection if needed, take the lease if it is free (else stay
        read-only), and read what the collection holds."""
        self.writer_id = self._config.writer_id or self._read_writer_id()
        points.ensure_collection(
            self.client,
            self._collection,
            EMBEDDING_DIM,
            hnsw_m=self._config.hnsw_m,
            hnsw_ef_construct=self._config.hnsw_ef_construct,
        )
        self._lease = CollectionLease(
            self.client,
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
        found = self._scan()
        others = {w: len(ids) for w, ids in found.pending_by_writer.items() if w != self.writer_id}
        if others:
            log.warning("unfinished writes of other instances stay hidden, untouched: %s", others)
        if found.foreign_points:
            log.info("%d points without a document id are left alone", found.foreign_points)
        return self._adopt(found, cached)

    def _read_writer_id(self) -> str:
        """This data folder's id on a shared collection, made once and kept."""
        path = self._data_dir / "writer_id"
        if not path.exists():
            writer_id = uuid.uuid4().hex
            atomic_write(path, lambda fh: fh.write(writer_id.encode()))
        return path.read_text(encoding="utf-8").strip()

    def _scan(self) -> CollectionScan:
        return points.scan(self.client, self._collection)

    def _adopt(self, found: CollectionScan, state: KBState) -> KBState:
        """The state the collection's committed points say, in place of ``state``'s; a
        new KB version where the documents differ (cached in the state file)."""
        before = state.hashes()
        state.replace_from_scan(found)
        if state.hashes() != before:
            state.version += 1
            log.info("knowledge base read from the collection: %d documents", len(found.current))
        self.save(state)
        return state

    @property
    def writable(self) -> bool:
        """False while another instance holds the writer's lease."""
        return self._lease is not None and self._lease.held

    def take_writer(self, state: KBState) -> KBState:
        """The lease, taken now if it lapsed (then a fresh scan, since the last holder
        may have written), or ``CollectionLeasedError``."""
        if self._lease is None:
            raise RuntimeError("the shared collection is not open yet")
        if self._lease.held:
            return state
        self._lease.acquire()
        return self._adopt(self._scan(), state)

    def release(self) -> None:
        """Give the lease up now, so another instance can take over without waiting for
        it to lapse."""
        if self._lease is not None:
            self._lease.release()

    def stage(self, state: KBState, nodes: Sequence[BaseNode], triples: Triples) -> None:
        """Tag the chunks pending, with this writer's id: invisible until ``publish``."""
        points.mark_pending(nodes, self.writer_id, triples)

    def retire(self, state: KBState, chunk_ids: Sequence[str]) -> None:
        """Nothing to log: a start scans the collection (``remove_leftovers``)."""

    def settle(self, state: KBState, chunk_ids: Sequence[str]) -> None:
        """Nothing to log, as for ``retire``."""

    def publish(self, point_ids: Sequence[str]) -> None:
        """The commit point: make a write's chunks visible, if we still hold the lease."""
        assert self._lease is not None
        if not self._lease.renew():  # another instance took over while we embedded
            raise CollectionLeasedError(self._collection, self._lease.current())
        points.commit(self.client, self._collection, point_ids)
        checkpoint("ingest.points_committed")

    def withdraw(self, doc_id: str) -> None:
        """The points are the commit point, so they go first: one document's committed
        chunks are removed (another writer's pending ones stay)."""
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
        self.client.delete(self._collection, points_selector=selector)
        checkpoint("delete.points_removed")

    def save(self, state: KBState) -> None:
        """A cache of what the committed points say, so a failure to write it fails
        nothing: the changes stay in the open transaction, committed with the next save
        that succeeds (or rebuilt by the next start)."""
        try:
            state.save()
        except OSError:
            log.warning("could not cache the docstore in %s; the collection has it", self._data_dir)

    def reread(self, state: KBState) -> KBState:
        return self._adopt(self._scan(), state)  # the points are the truth

    def remove_leftovers(self, state: KBState) -> int:
        """Only this instance's unfinished writes, and only while it holds the lease."""
        if not self.writable:
            return 0
        leftovers = self._scan().own_leftovers(self.writer_id)
        if leftovers:
            log.warning(
                "reconcile: removing %d chunks of this instance's unfinished writes", len(leftovers)
            )
            self.client.delete(self._collection, points_selector=qm.PointIdsList(points=leftovers))
        return len(leftovers)

    def visible(self) -> qm.Filter | None:
        return points.visible_chunks()  # neither pending chunks nor the lease point
