"""The knowledge graph: triples with provenance, kept on disk.

Nodes are keyed by normalized entity name and keep a display name; every edge is one triple
from one document (predicate, doc_id, chunk_id, source, and the subject/object surface
forms that document used; ``kg.edits`` edits them). The graph always mirrors the
documents: replacing a document swaps its edges, removing one drops its edges and then any
node left without edges.

``kg.graph_file`` persists it: each change writes only the rows it touches, in one SQLite
transaction, with the versions of the documents it reflects. What changes edit, the
embedding tables and the read-only ``GraphSnapshot`` live in memory and are rebuilt from
the file at start: the snapshot first (read back from ``kg.snapshot_file`` after a clean
close, its vectors mapped from their files rather than read), the rest after it in a
thread (``load``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from kg import heap, snapshot_file
from kg.edits import GraphEdits, keyed_triples
from kg.embeddings import EmbeddingTable, EmbedFn, embed_checked
from kg.graph_file import (
    GRAPH_DB_FILE,
    GraphChange,
    GraphFile,
    GraphRows,
    Vectors,
    node_names,
)
from kg.index import GraphSnapshot
from kg.legacy import read_legacy_folder
from kg.models import EntityInfo, Neighbourhood, Triple
from kg.normalize import EntityNormalizer, default_normalizer
from kg.views import around, edge_triple, search_entities

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
        self._edits = GraphEdits()
        self._node_vectors = EmbeddingTable(quantized=True)  # a question scans every row
        self._triple_vectors = EmbeddingTable()
        self._snapshot = GraphSnapshot()
        self._versions: dict[str, str] = {}
        # The rows (and their nodes' names) what changes edit is yet to be built from.
        self._pending: tuple[GraphRows, dict[str, str]] | None = None
        self._unread = False  # the snapshot was read back: the rows are yet to be read
        self._vectors_read = False  # a start read the vectors into memory (not mapped)
        self._behind = False  # a write failed: the file is behind memory until ``save``
        self._closed = False
        self._prepared = threading.Event()  # what changes edit is built
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
        return dict(self._versions)  # replaced, never changed in place: no lock

    def triples_for_document(self, doc_id: str) -> list[Triple]:
        """The document's triples in the order they were given (empty if unknown)."""
        with self._lock:
            self._mutable()
            return [edge_triple(row) for row in self._edits.doc_edges.get(doc_id, [])]

    def search_entities(self, q: str, limit: int = 20) -> list[EntityInfo]:
        """``kg.views.search_entities`` on this graph."""
        with self._lock:
            self._mutable()
            return search_entities(self._edits, self.normalizer, q, limit)

    def around(self, name: str, limit: int = 50) -> Neighbourhood | None:
        """``kg.views.around`` on this graph."""
        with self._lock:
            self._mutable()
            return around(self._edits, self.normalizer, name, limit)

    # -- write side -----------------------------------------------------------------------

    def remove_document(self, doc_id: str) -> bool:
        """Drop the document's triples and any entity left without edges; False if unknown."""
        with self._lock:
            self._mutable()
            known = doc_id in self._edits.doc_edges or doc_id in self._versions
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
            added_nodes, added_texts = self._embed_missing(
                [
                    (key, t.subject if key == sk else t.object)
                    for rows in prepared.values()
                    for t, sk, _, ok in rows
                    for key in (sk, ok)
                ],
                [t.text for rows in prepared.values() for t, _, _, _ in rows],
            )
            touched: set[str] = set()
            released: set[str] = set()
            for doc_id, rows in prepared.items():
                touched |= self._edits.drop_edges(doc_id, released)
                touched |= self._edits.add_edges(doc_id, rows)
            removed_nodes = self._edits.settle_nodes(touched)
            # A text released by one document may be stated by another in the same change.
            released = {t for t in released if t not in self._edits.text_refs}
            self._node_vectors.discard(removed_nodes)
            self._triple_vectors.discard(released)
            filed = {**self._versions, **versions}  # None: the document's version removed
            self._versions = {doc_id: v for doc_id, v in filed.items() if v is not None}
            self._snapshot = self._snapshot.apply(
                self._edits.snapshot_change(prepared, touched, removed_nodes),
                self._node_vectors,
                self._triple_vectors,
            )
            new_texts = [t for t in added_texts if t in self._triple_vectors]
            new_facts = self._triple_vectors.gather(new_texts)
            # After the swap: a failed write leaves memory consistent, and the file at the
            # last change, with the versions it had (a restart's sync repairs from those).
            try:
                if self._autosave:
                    self._write(
                        GraphChange(
                            replaced=set(prepared),
                            versions=dict(versions),
                            edges=[r for d in prepared for r in self._edits.doc_edges.get(d, [])],
                            nodes=self._edits.names(touched),
                            removed_nodes=removed_nodes,
                            node_vectors=Vectors.of(self._node_vectors, added_nodes),
                            triple_vectors=Vectors.of(self._triple_vectors, added_texts),
                            removed_node_vectors=removed_nodes,
                            removed_triple_vectors=released,
                        )
                    )
            finally:
                heap.trim()
            return new_facts

    def save(self) -> None:
        """Write the whole graph to the folder's file (each change does, with autosave)."""
        with self._lock:
            self._mutable()
            nodes, texts = sorted(self._edits.node_names), sorted(self._edits.text_refs)
            snapshot_file.discard(self._folder)
            self._file.replace(
                GraphRows(
                    edges=list(self._edits.edges()),
                    nodes=self._edits.names(nodes),
                    node_vectors=Vectors.of(self._node_vectors, nodes),
                    triple_vectors=Vectors.of(self._triple_vectors, texts),
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
                try:
                    snapshot_file.save(self._folder, self._snapshot, self._versions)
                except OSError as exc:  # the next start builds from the rows
                    log.warning("knowledge graph: the snapshot was not saved: %s", exc)

    def _write(self, change: GraphChange) -> None:
        """Write ``change`` to the file, the saved snapshot removed first (stale after)."""
        snapshot_file.discard(self._folder)
        try:
            self._file.write(change)
        except BaseException:
            self._behind = True  # later writes hold their own rows, not this one's
            raise

    # -- internals ------------------------------------------------------------------------

    def _embed_missing(
        self, nodes: list[tuple[str, str]], texts: list[str]
    ) -> tuple[list[str], list[str]]:
        """Embed, in one call, node names and triple texts that have no vector yet; return
        the node keys and texts embedded."""
        names = {key: name for key, name in reversed(nodes)}  # first name given wins
        missing_nodes = self._node_vectors.missing(key for key, _ in nodes)
        missing_texts = self._triple_vectors.missing(texts)
        if not missing_nodes and not missing_texts:
            return [], []
        vectors = embed_checked(self._embed, [names[k] for k in missing_nodes] + missing_texts)
        self._node_vectors.add(missing_nodes, vectors[: len(missing_nodes)])
        self._triple_vectors.add(missing_texts, vectors[len(missing_nodes) :])
        return missing_nodes, missing_texts

    def load(self, prepare: bool = True) -> None:
        """Read the graph from its folder (the constructor does, unless ``load=False``).

        The snapshot that chats read is built from the file's rows (after a clean close,
        read back instead); what changes edit is built after, in a thread, and a change
        or an operator's view that comes first waits for it. ``prepare=False`` starts no
        thread: the first change or view builds it (the service's way: at 323,000
        triples, built beside a start, it slowed /ready to 30.1 s from 4 s for the
        snapshot itself, and after it the first chat to 5.3 s)."""
        started = time.perf_counter()
        with self._lock, heap.collector_paused():
            self._closed = False
            exists = (self._folder / GRAPH_DB_FILE).exists()
            saved = snapshot_file.load(self._folder) if exists else None
            if saved is not None:
                self._snapshot, self._versions = saved
                self._unread = True
            else:
                rows = snapshot_file.read_rows(
                    self._file, self._folder, read_legacy_folder, self._autosave
                )
                names = self._adopt(rows)
                self._snapshot = GraphSnapshot.build_from(
                    rows.edges, names, self._node_vectors, self._triple_vectors
                )
        log.info(
            "knowledge graph: %d triples %s in %.1f s",
            self._snapshot.edge_count,
            "read back from the snapshot saved at the last stop" if saved else "read",
            time.perf_counter() - started,
        )
        self._prepared.clear()
        if self._pending is None and not self._unread:
            self._prepared.set()
        elif prepare:
            self.prepare()

    def prepare(self) -> None:
        """Build what changes edit (from the rows read) in a thread now;
        a change or an operator's view that comes first builds it itself."""
        threading.Thread(target=self._build_graph, name="kg-graph", daemon=True).start()

    def wait_prepared(self, timeout: float | None = None) -> bool:
        """Wait until what changes edit is built (``prepare``); False on ``timeout``."""
        return self._prepared.wait(timeout)

    def _adopt(self, rows: GraphRows) -> dict[str, str]:
        """Take the file's versions and vectors (repaired), keep the rows for what changes
        edit; return the nodes' display names."""
        nodes = rows.node_vectors
        self._vectors_read = bool(nodes.keys) and nodes.matrix.flags.writeable
        self._versions = dict(rows.versions)
        self._node_vectors = EmbeddingTable.adopt(
            nodes.keys, nodes.matrix, quantized=True, codes=nodes.codes
        )
        self._triple_vectors = EmbeddingTable.adopt(
            rows.triple_vectors.keys, rows.triple_vectors.matrix
        )
        names = node_names(rows)
        self._repair_vectors(names, {edge.text for edge in rows.edges})
        self._pending = rows, names
        return names

    def _build_graph(self) -> None:
        with self._lock:  # logged before a change waiting on the lock goes on
            try:
                if not self._closed:  # closed first (a short test, a start that failed)
                    self._mutable()
            except Exception:  # the rows stay: the next change or view builds it
                log.exception("knowledge graph: building the graph after the start failed")

    @heap.collector_paused()
    def _mutable(self) -> None:
        """Build what changes edit from the rows a start read, if not yet done (the
        caller holds the lock). A build that fails is tried again on the next call."""
        if self._unread:
            read = self._file.read(legacy=read_legacy_folder, vectors=False)
            if (len(read.edges), read.versions) == (self._snapshot.edge_count, self._versions):
                read.node_vectors, read.triple_vectors = snapshot_file.table_vectors(self._snapshot)
                self._adopt(read)
            else:  # the file changed after the start (not through this graph)
                log.warning("knowledge graph: the file changed since the start; re-indexing")
                read = snapshot_file.read_rows(
                    self._file, self._folder, read_legacy_folder, self._autosave
                )
                names = self._adopt(read)
                self._snapshot = GraphSnapshot.build_from(
                    read.edges, names, self._node_vectors, self._triple_vectors
                )
            self._unread = False
        if self._pending is not None:
            started = time.perf_counter()
            rows, names = self._pending
            self._edits = GraphEdits.of_rows(rows.edges, names)
            self._pending = None
            if self._vectors_read and self._autosave:  # out of the process's memory
                tables = snapshot_file.map_tables(
                    self._folder, self._node_vectors, self._triple_vectors
                )
                if tables is not None:  # else they stay (logged)
                    self._node_vectors, self._triple_vectors = tables
                    self._snapshot = self._snapshot.with_vectors(*tables)
                    self._vectors_read = False
            heap.trim()
            self._prepared.set()
            log.info(
                "knowledge graph: %d triples ready for changes (built in %.1f s)",
                len(rows.edges),
                time.perf_counter() - started,
            )

    def _repair_vectors(self, names: Mapping[str, str], texts: set[str]) -> None:
        """Embed vectors that are missing, drop orphaned ones (normally a no-op: a change
        writes its vectors with its edges; the old layout could lose some in a crash)."""
        added_nodes, added_texts = self._embed_missing(list(names.items()), list(texts))
        dropped_nodes = self._node_vectors.retain(set(names))
        dropped_texts = self._triple_vectors.retain(texts)
        if self._autosave and (added_nodes or added_texts or dropped_nodes or dropped_texts):
            self._write(
                GraphChange(
                    node_vectors=Vectors(added_nodes, self._node_vectors.gather(added_nodes)),
                    triple_vectors=Vectors(added_texts, self._triple_vectors.gather(added_texts)),
                    removed_node_vectors=dropped_nodes,
                    removed_triple_vectors=dropped_texts,
                )
            )
