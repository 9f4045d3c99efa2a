"""The write path of the knowledge: one writer, the knowledge base, its graph, listeners.

Write order and recovery, in one place:

1. One write at a time (a lock held in a worker thread, never on the event loop).
2. The knowledge base commits (``KnowledgeBase``: new chunks, then the docstore
   file, then old chunks removed). The docstore file is the commit point: a crash
   before it leaves the old version, after it the new one. With ``parse_beside``, an
   ingest's new chunks are parsed for the graph while they are embedded
   (``GraphSync.parse_ahead``), which writes nothing.
3. The graph is brought in step with the committed documents (``GraphSync``). A
   crash before that is repaired at the next open: ``GraphSync.reconcile`` re-syncs
   every document whose graph state differs from the docstore.
4. Change listeners (warmup's detector, metrics) hear of the change on the event loop.

Reads never wait for a write: retrieval reads Qdrant and the graph's current
snapshot, both of which a write swaps in only once it is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import anyio

from rag.knowledge.base import KnowledgeBase
from rag.knowledge.faults import checkpoint
from rag.knowledge.graph_sync import GraphSync, ParsedAhead
from rag.knowledge.models import ChangeSet, DocumentIn

log = logging.getLogger(__name__)

ChangeListener = Callable[[ChangeSet], None]
#: A write on the knowledge base: its change, and the parse of its new chunks begun
#: beside it, if any.
Write = Callable[[], tuple[ChangeSet, ParsedAhead | None]]


class KnowledgeService:
    """Owns every change to the knowledge base and the graph derived from it."""

    def __init__(
        self, kb: KnowledgeBase, graph_sync: GraphSync, *, parse_beside: bool = False
    ) -> None:
        """``parse_beside``: parse an ingest's chunks for the graph in a thread of their
        own while the knowledge base embeds them (``Settings.kg_parse_beside_embedding``
        says what that costs chats); else after the commit, in the write's thread."""
        self.kb = kb
        self.graph_sync = graph_sync
        self.parse_beside = parse_beside
        self._write_lock = threading.Lock()
        self._listeners: list[ChangeListener] = []

    def add_listener(self, listener: ChangeListener) -> None:
        """``listener(change)`` runs on the event loop after every write (even one that
        found every document unchanged)."""
        self._listeners.append(listener)

    def open(self) -> None:
        """Open the stores and repair what a crash left (blocking: run it in a thread)."""
        self.kb.open()
        self.graph_sync.open()
        self.graph_sync.reconcile()

    def close(self) -> None:
        self.kb.close()
        self.graph_sync.close()

    # ----- writes ---------------------------------------------------------------------

    async def ingest(self, documents: Sequence[DocumentIn]) -> ChangeSet:
        """Upsert by content hash; unchanged documents embed nothing."""
        return await self._write(lambda: self._upsert(documents), "ingest")

    async def delete(self, doc_id: str) -> ChangeSet:
        """Remove a document, its chunks and its triples (``DocumentNotFoundError`` if unknown)."""
        return await self._write(lambda: (self.kb.delete(doc_id), None), "delete")

    def _upsert(self, documents: Sequence[DocumentIn]) -> tuple[ChangeSet, ParsedAhead | None]:
        """``KnowledgeBase.upsert``, its new chunks parsed for the graph while it embeds
        them where ``parse_beside``; a failed upsert waits for that parse before it raises."""
        if not self.parse_beside:
            return self.kb.upsert(documents), None
        ahead: list[ParsedAhead] = []

        def parse(chunks: dict[str, list[tuple[str, str]]]) -> None:
            if (parsing := self.graph_sync.parse_ahead(chunks)) is not None:
                ahead.append(parsing)

        try:
            change = self.kb.upsert(documents, on_chunked=parse)
        except BaseException:
            for parsing in ahead:
                parsing.settle()
            raise
        return change, ahead[0] if ahead else None

    async def _write(self, operation: Write, kind: str) -> ChangeSet:
        change = await anyio.to_thread.run_sync(self._locked_write, operation, kind)
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:  # a listener must not turn a committed write into an error
                log.exception("change listener failed for kb_version %d", change.kb_version)
        return change

    def _locked_write(self, operation: Write, kind: str) -> ChangeSet:
        with self._write_lock:
            change, ahead = operation()
            if change.changed:
                try:
                    self.graph_sync.apply(change, ahead)
                except Exception:
                    # Committed in the knowledge base; the graph in memory may be behind
                    # only if the sync failed before its swap. Re-sync from the KB now;
                    # a restart's reconcile does the same if this fails too.
                    log.exception("graph sync failed after kb_version %d", change.kb_version)
                    self._resync_quietly()
                checkpoint(f"{kind}.graph_synced")
            self._clean_up_quietly()
        return change

    def _resync_quietly(self) -> None:
        try:
            self.graph_sync.reconcile()
        except Exception:
            log.exception("graph re-sync failed; the next start repairs it")

    def _clean_up_quietly(self) -> None:
        try:
            removed = self.kb.reconcile_if_needed()
            if removed:
                log.info("removed %d orphaned chunks left by an earlier failure", removed)
        except Exception:
            log.exception("orphan clean-up failed again; retried after the next write")
