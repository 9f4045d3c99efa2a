"""The knowledge graph: a networkx MultiDiGraph of triples with provenance, kept on disk.

Nodes are keyed by normalized entity name and keep a display name; every edge is one triple
from one document (attributes: predicate, doc_id, chunk_id, source, and the subject/object
surface forms that document used). The graph always mirrors the documents: replacing a
document swaps its edges, removing one drops its edges and then any node left without edges.

``kg.graph_file`` persists it: each change writes only the rows it touches, in one SQLite
transaction, with the versions of the documents it reflects. The networkx graph, the
embedding tables and the read-only ``GraphSnapshot`` live in memory and are rebuilt from
the file at start: the snapshot first, the networkx graph after it in a thread (``load``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from kg.embeddings import EmbeddingTable, EmbedFn, embed_checked
from kg.graph_file import (
    EdgeRef,
    EdgeRow,
    GraphChange,
    GraphFile,
    GraphRows,
    Vectors,
    edge_items,
    edge_rows,
    graph_from_rows,
    node_names,
)
from kg.index import GraphSnapshot
from kg.legacy import read_legacy_folder
from kg.models import EntityInfo, Neighbourhood, Triple, triple_text
from kg.normalize import EntityNormalizer, default_normalizer, normalize_predicate
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
        self._graph = nx.MultiDiGraph()
        self._doc_edges: dict[str, list[EdgeRef]] = {}
        self._text_refs: Counter[str] = Counter()
        self._node_vectors = EmbeddingTable()
        self._triple_vectors = EmbeddingTable()
        self._snapshot = GraphSnapshot()
        self._versions: dict[str, str] = {}
        self._pending: GraphRows | None = None  # rows the networkx graph is yet to be built from
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
            return [edge_triple(self._graph, ref) for ref in self._doc_edges.get(doc_id, [])]

    def search_entities(self, q: str, limit: int = 20) -> list[EntityInfo]:
        """``kg.views.search_entities`` on this graph."""
        with self._lock:
            self._mutable()
            return search_entities(self._graph, self.normalizer, q, limit)

    def around(self, name: str, limit: int = 50) -> Neighbourhood | None:
        """``kg.views.around`` on this graph."""
        with self._lock:
            self._mutable()
            return around(self._graph, self.normalizer, name, limit)

    # -- write side -----------------------------------------------------------------------

    def remove_document(self, doc_id: str) -> bool:
        """Drop the document's triples and any entity left without edges; False if unknown."""
        with self._lock:
            self._mutable()
            known = doc_id in self._doc_edges or doc_id in self._versions
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
    ) -> None:
        """Replace several documents' triples in one change (one embed call, one write).

        Every triple must carry the doc_id it is filed under. ``versions`` records, per
        document, which version of it these triples reflect (``document_versions``). New
        node names and triple texts are embedded before the graph is touched, so a failing
        ``embed`` changes nothing.
        """
        self._change(documents, dict(versions or {}))

    def _change(
        self, documents: Mapping[str, Sequence[Triple]], versions: Mapping[str, str | None]
    ) -> None:
        prepared = {doc_id: self._prepare(doc_id, ts) for doc_id, ts in documents.items()}
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
                touched |= self._drop_edges(doc_id, released)
                touched |= self._add_edges(doc_id, rows)
            removed_nodes = self._settle_nodes(touched)
            # A text released by one document may be stated by another in the same change.
            released = {t for t in released if t not in self._text_refs}
            self._node_vectors.discard(removed_nodes)
            self._triple_vectors.discard(released)
            filed = dict(self._versions)
            for doc_id, version in versions.items():
                if version is None:
                    filed.pop(doc_id, None)
                else:
                    filed[doc_id] = version
            self._versions = filed
            self._snapshot = GraphSnapshot.build(
                self._graph, self._node_vectors, self._triple_vectors
            )
            if not self._autosave:
                return
            # After the swap: a failed write leaves memory consistent, and the file at the
            # last change, with the versions it had (a restart's sync repairs from those).
            self._file.write(
                GraphChange(
                    replaced=set(prepared),
                    versions=dict(versions),
                    edges=[
                        EdgeRow.from_attributes(u, v, key, self._graph.edges[u, v, key])
                        for doc_id in prepared
                        for u, v, key in self._doc_edges.get(doc_id, [])
                    ],
                    nodes=self._names(touched),
                    removed_nodes=removed_nodes,
                    node_vectors=Vectors.of(self._node_vectors, added_nodes),
                    triple_vectors=Vectors.of(self._triple_vectors, added_texts),
                    removed_node_vectors=removed_nodes,
                    removed_triple_vectors=released,
                )
            )

    def save(self) -> None:
        """Write the whole graph to the folder's file (each change does, with autosave)."""
        with self._lock:
            self._mutable()
            nodes, texts = sorted(self._graph.nodes), sorted(self._text_refs)
            self._file.replace(
                GraphRows(
                    edges=edge_rows(self._graph),
                    nodes=self._names(nodes),
                    node_vectors=Vectors.of(self._node_vectors, nodes),
                    triple_vectors=Vectors.of(self._triple_vectors, texts),
                    versions=dict(self._versions),
                )
            )

    def close(self) -> None:
        """Close the folder's file (the graph in memory stays readable)."""
        self._file.close()

    # -- internals ------------------------------------------------------------------------

    def _names(self, nodes: Iterable[str]) -> dict[str, str]:
        """Display names of those of ``nodes`` still in the graph."""
        return {n: str(self._graph.nodes[n].get("name", n)) for n in nodes if n in self._graph}

    def _prepare(
        self, doc_id: str, triples: Sequence[Triple]
    ) -> list[tuple[Triple, str, str, str]]:
        """(triple, subject key, predicate key, object key), duplicates within the doc dropped."""
        rows: list[tuple[Triple, str, str, str]] = []
        seen: set[tuple[str, str, str, str | None, str]] = set()
        for triple in triples:
            if triple.doc_id != doc_id:
                raise ValueError(f"triple of document {triple.doc_id!r} filed under {doc_id!r}")
            sk = self.normalizer.normalize(triple.subject)
            pk = normalize_predicate(triple.predicate)
            ok = self.normalizer.normalize(triple.object)
            identity = (sk, pk, ok, triple.chunk_id, triple.source)
            if identity not in seen:
                seen.add(identity)
                rows.append((triple, sk, pk, ok))
        return rows

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

    def _drop_edges(self, doc_id: str, released: set[str]) -> set[str]:
        """Remove the document's edges; add texts no edge states any more to ``released``."""
        touched: set[str] = set()
        for u, v, key in self._doc_edges.pop(doc_id, []):
            data = self._graph.edges[u, v, key]
            text = _edge_text(data)
            if self._release_text(text):
                released.add(text)
            self._graph.remove_edge(u, v, key)
            touched.update((u, v))
        return touched

    def _add_edges(self, doc_id: str, rows: list[tuple[Triple, str, str, str]]) -> set[str]:
        refs: list[EdgeRef] = []
        touched: set[str] = set()
        for i, (triple, sk, _, ok) in enumerate(rows):
            for key, name in ((sk, triple.subject), (ok, triple.object)):
                if key not in self._graph:
                    self._graph.add_node(key, name=name)
            edge_key = f"{doc_id}#{i}"
            self._graph.add_edge(
                sk,
                ok,
                key=edge_key,
                predicate=triple.predicate,
                doc_id=doc_id,
                chunk_id=triple.chunk_id,
                source=triple.source,
                subject_name=triple.subject,
                object_name=triple.object,
            )
            self._text_refs[triple.text] += 1
            refs.append((sk, ok, edge_key))
            touched.update((sk, ok))
        if refs:
            self._doc_edges[doc_id] = refs
        return touched

    def _settle_nodes(self, touched: set[str]) -> set[str]:
        """Drop touched nodes left without edges (returned); keep survivors' display
        names truthful."""
        removed: set[str] = set()
        for node in touched:
            if node not in self._graph:
                continue
            if self._graph.degree(node) == 0:
                self._graph.remove_node(node)
                removed.add(node)
                continue
            forms = self._surface_forms(node)
            if self._graph.nodes[node].get("name") not in forms:
                # The document that named it is gone: take a remaining form, deterministically.
                self._graph.nodes[node]["name"] = min(forms)
        return removed

    def _surface_forms(self, node: str) -> set[str]:
        forms = {str(d["subject_name"]) for _, _, d in self._graph.out_edges(node, data=True)}
        forms |= {str(d["object_name"]) for _, _, d in self._graph.in_edges(node, data=True)}
        return forms

    def _release_text(self, text: str) -> bool:
        """One edge fewer states ``text``; True when none does any more."""
        self._text_refs[text] -= 1
        if self._text_refs[text] <= 0:
            del self._text_refs[text]
            return True
        return False

    def load(self) -> None:
        """Read the graph from its folder (the constructor does, unless ``load=False``).

        The snapshot that chats read is built from the file's rows; the networkx graph
        that changes edit is built after, in a thread, and a change (or an operator's
        view) that comes first waits for it. At 323,000 triples that graph took 8 s of a
        start's 22 s."""
        with self._lock:
            self._load(self._file.read(legacy=read_legacy_folder))
        threading.Thread(target=self._build_graph, name="kg-graph", daemon=True).start()

    def _load(self, rows: GraphRows) -> None:
        self._versions = dict(rows.versions)
        self._node_vectors = EmbeddingTable.adopt(rows.node_vectors.keys, rows.node_vectors.matrix)
        self._triple_vectors = EmbeddingTable.adopt(
            rows.triple_vectors.keys, rows.triple_vectors.matrix
        )
        names = node_names(rows)
        texts = {triple_text(e.subject_name, e.predicate, e.object_name) for e in rows.edges}
        self._repair_vectors(names, texts)
        self._snapshot = GraphSnapshot.build_from(
            edge_items(rows), names, self._node_vectors, self._triple_vectors
        )
        self._pending = rows

    def _build_graph(self) -> None:
        try:
            with self._lock:
                self._mutable()
        except Exception:  # the rows stay: the next change or view builds it
            log.exception("knowledge graph: building the graph after the start failed")

    def _mutable(self) -> None:
        """Build the networkx graph from the rows a start read, if not yet done (the
        caller holds the lock). A build that fails is tried again on the next call."""
        rows = self._pending
        if rows is not None:
            started = time.perf_counter()
            self._graph, self._doc_edges, self._text_refs = graph_from_rows(rows)
            self._pending = None
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
            self._file.write(
                GraphChange(
                    node_vectors=Vectors(added_nodes, self._node_vectors.gather(added_nodes)),
                    triple_vectors=Vectors(added_texts, self._triple_vectors.gather(added_texts)),
                    removed_node_vectors=dropped_nodes,
                    removed_triple_vectors=dropped_texts,
                )
            )


def _edge_text(data: Mapping[str, Any]) -> str:
    return triple_text(str(data["subject_name"]), str(data["predicate"]), str(data["object_name"]))
