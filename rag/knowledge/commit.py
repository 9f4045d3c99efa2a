"""How a write to the knowledge base commits, and what says what is committed.

``KnowledgeBase`` runs every write in one order: new chunks added, the write committed,
old chunks removed. Where the two ways of storing the collection differ, it asks its
``CommitStrategy``, chosen once when it is built (``api.stores.build_knowledge``):

- ``EmbeddedCommit``, the default: an index in the data folder (a Qdrant Edge shard, or
  Qdrant local mode where the operator asks for it), which warmrag owns. The docstore
  file is the commit point.
- ``SharedCommit`` (``rag.knowledge.shared_commit``): a collection on a Qdrant server,
  which may outlive the data folder or be seen by a second instance. The points carry
  the state instead, the docstore is rebuilt from them at open, one instance holds the
  writer's lease, and clean-up removes only this instance's own half-finished writes:
  see ``rag.knowledge.collection``.

Either way the state (``KBState``) is kept in the data folder's ``kb.sqlite3``; the
strategy says whether that file is the truth or a cache of the points.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from llama_index.core.schema import BaseNode
from qdrant_client import models as qm

from durable import remove_stale_temps
from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.state import LEGACY_FILE, KBState, Triples
from rag.knowledge.vectors import VectorIndex

log = logging.getLogger(__name__)

T = TypeVar("T")


def require_open(value: T | None) -> T:
    """``value``, which ``open`` sets: before it, the knowledge base is not open yet."""
    if value is None:
        raise RuntimeError("the knowledge base is not open yet")
    return value


class CommitStrategy(ABC):
    """One storage mode's part of every write and read; one per knowledge base, bound
    to its vector index by ``open``."""

    def __init__(self) -> None:
        self._index: VectorIndex | None = None
        self._collection = ""
        self._data_dir = Path()

    def open(self, index: VectorIndex, collection: str, data_dir: Path) -> KBState:
        """Bind to the opened index and return the committed state, as the mode reads it
        (an old folder's ``docstore.json`` moved into SQLite first)."""
        self._index, self._collection, self._data_dir = index, collection, data_dir
        remove_stale_temps(data_dir, LEGACY_FILE)  # what a crash mid-save left, before SQLite
        return self._start(KBState.open(data_dir))

    @property
    def index(self) -> VectorIndex:
        return require_open(self._index)

    @abstractmethod
    def _start(self, cached: KBState) -> KBState:
        """The committed state at open, given what the docstore file says."""

    @property
    @abstractmethod
    def writable(self) -> bool:
        """Whether this instance may write now."""

    @abstractmethod
    def take_writer(self, state: KBState) -> KBState:
        """Before a write: the right to write (or ``CollectionLeasedError``), and the
        committed state, read again where another writer may have changed it."""

    @abstractmethod
    def release(self) -> None:
        """Give up the right to write: read-only from here on."""

    @abstractmethod
    def stage(self, state: KBState, nodes: Sequence[BaseNode], triples: Triples) -> None:
        """A write's chunks, embedded, before they are added to the collection."""

    @abstractmethod
    def retire(self, state: KBState, chunk_ids: Sequence[str]) -> None:
        """Chunks the write being committed replaces or deletes, removed after the commit."""

    @abstractmethod
    def settle(self, state: KBState, chunk_ids: Sequence[str]) -> None:
        """A write's chunks are owned or removed: its clean-up is done."""

    @abstractmethod
    def publish(self, point_ids: Sequence[str]) -> None:
        """A write's chunks are in the collection; the docstore takes them next."""

    @abstractmethod
    def withdraw(self, doc_id: str) -> None:
        """A document is being deleted; the docstore drops it next."""

    @abstractmethod
    def save(self, state: KBState) -> None:
        """Commit the state's changes to its file."""

    @abstractmethod
    def reread(self, state: KBState) -> KBState:
        """After a failed write: the committed state, read again from where it lives."""

    @abstractmethod
    def remove_leftovers(self, state: KBState) -> int:
        """Delete (from an existing collection) chunks an interrupted write left that
        this mode may remove; return how many."""

    @abstractmethod
    def visible(self) -> qm.Filter | None:
        """What Qdrant lets readers see (None: every point)."""


class EmbeddedCommit(CommitStrategy):
    """The embedded default: the state file's transaction is the commit point.

    Write order keeps the store consistent across a crash at any point: new chunks are
    added first, then the state (docstore, KB version) commits, then the old chunks are
    deleted. Until that last step, and if it fails, Qdrant holds
    chunks no committed document owns ("orphans"): retrieval never returns them (each
    hit's document hash is checked against the docstore), and ``remove_leftovers`` (run
    at open, and after a write whose clean-up failed) removes them."""

    def _start(self, cached: KBState) -> KBState:
        return cached  # the file is the truth

    @property
    def writable(self) -> bool:
        return True  # the embedded index locks its folder: no other writer can open it

    def take_writer(self, state: KBState) -> KBState:
        return state

    def release(self) -> None:
        """Nothing to give up."""

    def stage(self, state: KBState, nodes: Sequence[BaseNode], triples: Triples) -> None:
        """Log the chunks as loose, committed before they reach the index: from here on
        a crash leaves them where the next start looks (chunks no committed document
        names are never retrieved meanwhile)."""
        state.mark_loose([n.node_id for n in nodes])
        try:
            state.save()
        except BaseException:
            state.rollback()
            raise

    def retire(self, state: KBState, chunk_ids: Sequence[str]) -> None:
        """Logged in the commit's own transaction: loose from the moment it commits."""
        state.mark_loose(chunk_ids)

    def settle(self, state: KBState, chunk_ids: Sequence[str]) -> None:
        state.settle(chunk_ids)
        try:
            state.save()
        except OSError:
            state.rollback()  # they stay logged: the next start checks them again
            log.warning("could not record a finished clean-up; the next start checks it")

    def publish(self, point_ids: Sequence[str]) -> None:
        """Nothing to do: saving the docstore commits."""

    def withdraw(self, doc_id: str) -> None:
        """Nothing to do: saving the docstore commits; the chunks go after it."""

    def save(self, state: KBState) -> None:
        """The commit point: a failure here fails the write."""
        state.save()

    def reread(self, state: KBState) -> KBState:
        state.rollback()
        return state

    def remove_leftovers(self, state: KBState) -> int:
        """Every logged loose chunk no committed document version owns: O(the writes
        that did not finish), not O(the index). A state without the log (a folder from
        before it) reads every point back once instead."""
        if state.logs_loose:
            checked = state.loose()
            stale = [c for c in checked if not state.owns(c)]
        else:
            stale = state.orphans(self.index.payloads(["doc_id", DOC_HASH_KEY]))
            checked = stale
            state.start_loose_log()
        if stale:
            log.warning("reconcile: removing %d chunks left by an interrupted write", len(stale))
            self.index.delete(stale)
        if checked or state.pending:
            state.settle(checked)
            try:
                state.save()
            except OSError:  # a full disk must not stop a start: they are checked again
                state.rollback()
                log.warning("could not record the clean-up; the next start checks again")
        return len(stale)

    def visible(self) -> qm.Filter | None:
        return None  # hits are checked against the docstore instead
