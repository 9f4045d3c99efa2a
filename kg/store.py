"""The knowledge graph: triples with provenance, kept on disk.

Nodes are keyed by normalized entity name and keep a display name; every edge is one triple
from one document (predicate, doc_id, chunk_id, source, and the subject/object surface
forms that document used). The graph always mirrors the documents: replacing a document
swaps its edges, removing one drops its edges and then any node left without edges.

``kg.graph_file`` persists it: each change writes only the rows it touches, in one SQLite
transaction, with the versions of the documents it reflects. In memory the graph is one
read-only ``GraphSnapshot`` (``kg.index``), which each change replaces (planned from it by
``kg.edits``), and the embedding tables its vectors come from (``kg.graph_tables``). A
start builds the snapshot from the file's rows, or reads it back from ``kg.snapshot_file``
after a clean close (its vectors mapped from their files rather than read); then the
tables take its vectors (``load``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from kg import axes_file, heap, row_files, snapshot_file
from kg.edits import keyed_triples, plan
from kg.embeddings import EmbedFn
from kg.graph_file import (
    GRAPH_DB_FILE,
    GraphChange,
    GraphFile,
    GraphRows,
    Vectors,
    node_names,
)
from kg.graph_tables import GraphTables
from kg.index import GraphSnapshot
from kg.legacy import read_legacy_folder
from kg.models import EntityInfo, Neighbourhood, Triple
from kg.normalize import EntityNormalizer, default_normalizer
from kg.views import around, document_triples, search_entities, stored_rows

log = logging.getLogger(__name__)


class KnowledgeGraph:
    """Document-scoped triple store with persisted embeddings; thread-safe.

    ``embed`` is called only for node names and triple texts the graph has never seen (one
    batched call per change). With ``autosave`` every change is written to the folder's
    file before it returns; without, ``save`` writes the whole graph.
    """

    def __init__(
        self,
        folder: Path | str,
        embed: EmbedFn,
        *,
        normalizer: EntityNormalizer | None = None,
        autosave: bool = True,
        load: bool = True,
    ) -> None:
        self._folder = Path(folder)
        self._embed = embed
        self._normalizer = normalizer
        self._autosave = autosave
        self._lock = threading.RLock()
        # Held only while a change edits the versions: the sync reads them without
        # waiting for a change, or the preparation for the first, to finish.
        self._versions_lock = threading.Lock()
        self._tables = GraphTables(self._folder, files=autosave)
        self._snapshot = GraphSnapshot()
        self._versions: dict[str, str] = {}
        self._unread = False  # the snapshot was read back: the tables are yet to take it
        # The tables took the snapshot's own rows: the next change binds its vectors to them.
        self._bind_rows = False
        self._behind = False  # a write failed: the file is behind memory until ``save``
        # What the snapshot read at the start depended on then (None: none was read, or it
        # is no longer what memory holds): ``close`` keeps it where that is unchanged.
        self._read_back: list[list[int] | None] | None = None
        self._closed = False
        self._prepared = threading.Event()  # the graph is ready for changes (``prepare``)
        self._file = GraphFile(self._folder)
        if load:
            self.load()

    # -- read side ------------------------------------------------------------------------

    @property
    def folder(self) -> Path:
        """Where the graph and its embeddings are persisted."""
        return self._folder

    @property
    def node_count(self) -> int:
        """Number of entities."""
        return len(self._snapshot.node_keys)

    @property
    def edge_count(self) -> int:
        """Number of triples (one per document that states it)."""
        return self._snapshot.edge_count

    @property
    def snapshot(self) -> GraphSnapshot:
        """The current read-only index; replaced (never mutated) by each change."""
        return self._snapshot

    @property
    def normalizer(self) -> EntityNormalizer:
        """The entity normalizer (the process-wide one unless injected)."""
        if self._normalizer is None:
            self._normalizer = default_normalizer()
        return self._normalizer

    def document_ids(self) -> list[str]:
        """Ids of documents that contribute triples, sorted."""
        return self._snapshot.document_ids()

    def document_versions(self) -> dict[str, str]:
        """The version each document's edges were filed with (``replace_documents``)."""
        with self._versions_lock:  # a change updates it in place, holding this alone
            return dict(self._versions)

    def triples_for_document(self, doc_id: str) -> list[Triple]:
        """The document's triples in the order they were given (empty if unknown)."""
        return document_triples(self._snapshot, doc_id)

    def search_entities(self, q: str, limit: int = 20) -> list[EntityInfo]:
        """``kg.views.search_entities`` on this graph."""
        return search_entities(self._snapshot, self.normalizer, q, limit)

    def around(self, name: str, limit: int = 50) -> Neighbourhood | None:
        """``kg.views.around`` on this graph."""
        return around(self._snapshot, self.normalizer, name, limit)

    # -- write side -----------------------------------------------------------------------

    def remove_document(self, doc_id: str) -> bool:
        """Drop the document's triples and any entity left without edges; False if unknown."""
        with self._lock:
            known = doc_id in self._snapshot.chunks.documents or doc_id in self._versions
            if known:
                self.remove_documents([doc_id])
            return known

    def remove_documents(self, doc_ids: Sequence[str]) -> None:
        """Drop these documents' triples and versions in one change."""
        self._change({d: [] for d in doc_ids}, {d: None for d in doc_ids})

    def replace_documents(
        self,
        documents: Mapping[str, Sequence[Triple]],
        versions: Mapping[str, str] | None = None,
    ) -> np.ndarray:
        """Replace several documents' triples in one change (one embed call, one write);
        return the (n, dim) vectors of the triple texts the graph held nowhere before.

        Every triple must carry the doc_id it is filed under. ``versions`` records, per
        document, which version of it these triples reflect (``document_versions``). New
        node names and triple texts are embedded before the graph is touched, so a failing
        ``embed`` changes nothing.
        """
        return self._change(documents, dict(versions or {}))

    def _change(
        self, documents: Mapping[str, Sequence[Triple]], versions: Mapping[str, str | None]
    ) -> np.ndarray:
        prepared = {
            doc_id: keyed_triples(doc_id, ts, self.normalizer) for doc_id, ts in documents.items()
        }
        with self._lock:
            self._mutable()
            edit = plan(self._snapshot, prepared)
            rows = edit.change.edges
            tables = self._tables
            added_nodes, added_texts = tables.embed_missing(
                self._embed,
                [
                    (key, name)
                    for r in rows
                    for key, name in ((r.subject, r.subject_name), (r.object, r.object_name))
                ],
                [r.text for r in rows],
            )
            removed_nodes = set(edit.change.removed_nodes)
            tables.nodes.discard(removed_nodes)
            tables.triples.discard(edit.released)
            # In place, the change's documents alone (copied whole, 0.4 s a change at
            # 1,000,000 documents); None: the document's version removed.
            with self._versions_lock:
                for doc_id, version in versions.items():
                    if version is None:
                        self._versions.pop(doc_id, None)
                    else:
                        self._versions[doc_id] = version
            snapshot = self._snapshot
            if self._bind_rows:  # spliced, not looked up key by key (``GraphSnapshot.bound_to``)
                snapshot, self._bind_rows = snapshot.bound_to(tables.nodes, tables.triples), False
            snapshot = snapshot.apply(edit.change, tables.nodes, tables.triples)
            snapshot.node_vectors.prepare()  # here, not in the first question after it
            self._snapshot = snapshot
            new_texts = [t for t in added_texts if t in tables.triples]
            new_facts = tables.triples.gather(new_texts)
            tables.keep_axes(snapshot)
            # After the swap: a failed write leaves memory consistent, and the file at the
            # last change, with the versions it had (a restart's sync repairs from those).
            try:
                if self._autosave:
                    self._write(
                        GraphChange(
                            replaced=set(prepared),
                            versions=dict(versions),
                            edges=list(rows),
                            nodes=dict(edit.change.names),
                            removed_nodes=removed_nodes,
                            node_vectors=Vectors.of(tables.nodes, added_nodes),
                            triple_vectors=Vectors.of(tables.triples, added_texts),
                            removed_node_vectors=removed_nodes,
                            removed_triple_vectors=edit.released,
                        )
                    )
            finally:
                heap.trim()
            return new_facts

    def save(self) -> None:
        """Write the whole graph to the folder's file (each change does, with autosave)."""
        with self._lock:
            self._mutable()
            snap = self._snapshot
            nodes, texts = snap.node_keys, sorted(set(snap.edge_text))
            snapshot_file.discard(self._folder)
            self._file.replace(
                GraphRows(
                    edges=list(stored_rows(snap)),
                    nodes=dict(zip(nodes, snap.node_names, strict=True)),
                    node_vectors=Vectors.of(self._tables.nodes, nodes),
                    triple_vectors=Vectors.of(self._tables.triples, texts),
                    versions=dict(self._versions),
                )
            )
            self._behind = False

    def close(self) -> None:
        """Save the snapshot for the next start, when the file holds what memory does
        (``autosave``), and close the file (the graph in memory stays readable)."""
        with self._lock:
            self._closed = True
            self._file.close()
            if self._autosave and not self._behind and (self._folder / GRAPH_DB_FILE).exists():
                if self._snapshot_kept():
                    log.info("knowledge graph: the snapshot read at the start is kept")
                    return
                started = time.perf_counter()
                try:
                    snapshot_file.save(self._folder, self._snapshot, self._versions)
                except OSError as exc:  # the next start builds from the rows
                    log.warning("knowledge graph: the snapshot was not saved: %s", exc)
                    return
                took = time.perf_counter() - started
                log.info("knowledge graph: the snapshot saved for the next start in %.1f s", took)

    def _snapshot_kept(self) -> bool:
        """The snapshot the start read back is still on the disk (a write removes it) and
        what it depends on is as it was then: saving it again (50 s at 1,000,000 chunks)
        would write the same."""
        return (
            self._read_back is not None
            and (self._folder / snapshot_file.FILE).exists()
            and snapshot_file.depends_on(self._folder) == self._read_back
        )

    def _write(self, change: GraphChange) -> None:
        """Write ``change`` to the file, the saved snapshot removed first (stale after)."""
        snapshot_file.discard(self._folder)
        try:
            self._file.write(change)
        except BaseException:
            self._behind = True  # later writes hold their own rows, not this one's
            raise

    # -- start ----------------------------------------------------------------------------

    def load(self, prepare: bool = True) -> None:
        """Read the graph from its folder (the constructor does, unless ``load=False``).

        The snapshot that chats read is built from the file's rows (after a clean close,
        read back instead). What a change needs besides (``prepare``) is done after, in a
        thread, and a change that comes first waits for it. ``prepare=False`` starts no
        thread: the first change does it (the service's way: work beside a start slowed
        /ready at 323,000 triples to 30.1 s from 4 s for the snapshot itself)."""
        started = time.perf_counter()
        with self._lock, heap.collector_paused():
            self._closed = False
            self._bind_rows = False
            exists = (self._folder / GRAPH_DB_FILE).exists()
            self._tables.axes = axes_file.read(self._folder) if exists else None
            saved = snapshot_file.load(self._folder, self._tables.axes) if exists else None
            if saved is not None:
                self._snapshot, self._versions, current = saved
                self._unread = True
                if current:  # else the stop saves it again, in the current format
                    self._read_back = snapshot_file.depends_on(self._folder)
            else:
                self._read()
            self._tables.keep_axes(self._snapshot)
        log.info(
            "knowledge graph: %d triples %s in %.1f s",
            self._snapshot.edge_count,
            "read back from the snapshot saved at the last stop" if saved else "read",
            time.perf_counter() - started,
        )
        self._prepared.clear()
        if not self._unread and not self._tables.in_memory:
            self._ready(0.0)  # built from the rows: nothing left to do
        elif prepare:
            self.prepare()

    def prepare(self) -> None:
        """Make the graph ready for changes in a thread now (``_mutable``); a change that
        comes first does it itself."""
        threading.Thread(target=self._build_graph, name="kg-graph", daemon=True).start()

    def wait_prepared(self, timeout: float | None = None) -> bool:
        """Wait until the graph is ready for changes (``prepare``); False on ``timeout``."""
        return self._prepared.wait(timeout)

    def _read(self) -> None:
        """Build the snapshot from every row of the file (a start after a crash, or a
        file changed since the snapshot was saved), the tables from its vectors."""
        rows = row_files.read_rows(self._file, self._folder, read_legacy_folder, self._autosave)
        self._versions = dict(rows.versions)
        self._tables.adopt(rows.node_vectors, rows.triple_vectors)
        names = node_names(rows)
        self._repair_vectors(names, {edge.text for edge in rows.edges})
        self._snapshot = GraphSnapshot.build_from(
            rows.edges, names, self._tables.nodes, self._tables.triples
        )

    def _build_graph(self) -> None:
        with self._lock:  # logged before a change waiting on the lock goes on
            try:
                if not self._closed:  # closed first (a short test, a start that failed)
                    self._mutable()
            except Exception:  # done again by the next change
                log.exception("knowledge graph: preparing the graph for changes failed")

    @heap.collector_paused()
    def _mutable(self) -> None:
        """Make the graph ready for a change, if not yet done (the caller holds the lock);
        what fails is tried again on the next call.

        After a start that read the snapshot back: the file is checked against it (its
        count of edges and the documents' versions; a file changed since, not through this
        graph, is read again) and the tables take the snapshot's vectors. No row is read:
        building an editable copy of the graph from them took 94-103 s at 1,000,000
        chunks. After a start that read the vectors into memory, they move to files (tried
        once a start: a disk that refuses them would refuse them at each change)."""
        if self._prepared.is_set():
            return
        started = time.perf_counter()
        if self._unread:
            if self._file.summary() == (self._snapshot.edge_count, self._versions):
                self._tables.adopt(*snapshot_file.table_vectors(self._snapshot))
                self._bind_rows = True
            else:
                log.warning("knowledge graph: the file changed since the start; re-indexing")
                self._read_back = None  # the snapshot read is not what the file holds
                self._read()
            self._unread = False
        tables = self._tables
        if tables.in_memory and tables.map_to_files():  # out of the process's memory
            self._snapshot = self._snapshot.with_vectors(tables.nodes, tables.triples)
        heap.trim()
        self._ready(time.perf_counter() - started)

    def _ready(self, took_s: float) -> None:
        """Let changes go on; logged (``bench.service_start`` waits for the line)."""
        self._prepared.set()
        log.info(
            "knowledge graph: %d triples ready for changes (prepared in %.1f s)",
            self._snapshot.edge_count,
            took_s,
        )

    def _repair_vectors(self, names: Mapping[str, str], texts: set[str]) -> None:
        """Embed vectors that are missing, drop orphaned ones (``GraphTables.repair``)."""
        change = self._tables.repair(self._embed, names, texts)
        if self._autosave and change is not None:
            self._write(change)
