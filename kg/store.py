"""The knowledge graph: a networkx MultiDiGraph of triples with provenance, kept on disk.

Nodes are keyed by normalized entity name and keep a display name; every edge is one triple
from one document (attributes: predicate, doc_id, chunk_id, source, and the subject/object
surface forms that document used). The graph always mirrors the documents: replacing a
document swaps its edges, removing one drops its edges and then any node left without edges.

``kg.graph_file`` persists it: each change writes only the rows it touches, in one SQLite
transaction, with the versions of the documents it reflects. The networkx graph, the
embedding tables and the read-only ``GraphSnapshot`` live in memory and are rebuilt from
the file at start.
"""

from __future__ import annotations

import threading
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
    edge_rows,
    graph_from_rows,
)
from kg.index import GraphSnapshot
from kg.legacy import read_legacy_folder
from kg.models import EntityInfo, Neighbourhood, Triple, triple_text
from kg.normalize import EntityNormalizer, default_normalizer, normalize_predicate


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
        return int(self._graph.number_of_nodes())

    @property
    def edge_count(self) -> int:
        """Number of triples (one per document that states it)."""
        return int(self._graph.number_of_edges())

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
        with self._lock:
            return sorted(self._doc_edges)

    def document_versions(self) -> dict[str, str]:
        """The version each document's edges were filed with (``replace_documents``)."""
        with self._lock:
            return dict(self._versions)

    def triples_for_document(self, doc_id: str) -> list[Triple]:
        """The document's triples in the order they were given (empty if unknown)."""
        with self._lock:
            return [self._edge_triple(ref) for ref in self._doc_edges.get(doc_id, [])]

    def search_entities(self, q: str, limit: int = 20) -> list[EntityInfo]:
        """Entities whose key or display name contains ``q`` (case-insensitive).

        Exact matches first, then prefix matches, then the rest; within each, higher degree
        first, then key. An empty ``q`` lists the best-connected entities.
        """
        if limit <= 0:
            return []
        needle = " ".join(q.lower().split())
        key_needle = self.normalizer.normalize(needle) if needle else ""
        ranked: list[tuple[int, int, str, str]] = []
        with self._lock:
            for key, data in self._graph.nodes(data=True):
                name = str(data.get("name", key))
                haystacks = (key, name.lower())
                if needle and not any(needle in h or key_needle in h for h in haystacks):
                    continue
                if needle and (key == key_needle or name.lower() == needle):
                    rank = 0
                elif needle and any(h.startswith((needle, key_needle)) for h in haystacks):
                    rank = 1
                else:
                    rank = 2
                ranked.append((rank, -int(self._graph.degree(key)), key, name))
        ranked.sort()
        return [EntityInfo(key=k, name=n, degree=-d) for _, d, k, n in ranked[:limit]]

    def around(self, name: str, limit: int = 50) -> Neighbourhood | None:
        """The entity called ``name`` (any surface form its key normalizes to) and up to
        ``limit`` of its triples, outgoing first, each list sorted by predicate, subject,
        object and document; None if the graph has no such entity."""
        key = self.normalizer.normalize(name)

        def order(t: Triple) -> tuple[str, str, str, str]:
            return (t.predicate, t.subject, t.object, t.doc_id)

        with self._lock:
            if key not in self._graph:
                return None
            out_refs = list(self._graph.out_edges(key, keys=True))
            in_refs = [r for r in self._graph.in_edges(key, keys=True) if r[0] != key]
            outgoing = sorted((self._edge_triple(r) for r in out_refs), key=order)
            incoming = sorted((self._edge_triple(r) for r in in_refs), key=order)
            node = self._graph.nodes[key]
            entity = EntityInfo(
                key=key, name=str(node.get("name", key)), degree=int(self._graph.degree(key))
            )
        return Neighbourhood(
            entity=entity,
            outgoing=outgoing[:limit],
            incoming=incoming[: max(0, limit - len(outgoing))],
            total=len(outgoing) + len(incoming),
        )

    # -- write side -----------------------------------------------------------------------

    def remove_document(self, doc_id: str) -> bool:
        """Drop the document's triples and any entity left without edges; False if unknown."""
        with self._lock:
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
            for doc_id, version in versions.items():
                if version is None:
                    self._versions.pop(doc_id, None)
                else:
                    self._versions[doc_id] = version
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

    def _edge_triple(self, ref: EdgeRef) -> Triple:
        data = self._graph.edges[ref]
        return Triple(
            subject=data["subject_name"],
            predicate=data["predicate"],
            object=data["object_name"],
            doc_id=data["doc_id"],
            chunk_id=data.get("chunk_id"),
            source=data.get("source", "supplied"),
        )

    def load(self) -> None:
        """Read the graph from its folder (the constructor does, unless ``load=False``)."""
        with self._lock:
            self._load(self._file.read(legacy=read_legacy_folder))

    def _load(self, rows: GraphRows) -> None:
        self._graph, self._doc_edges, self._text_refs = graph_from_rows(rows)
        self._versions = dict(rows.versions)
        self._node_vectors = EmbeddingTable()
        self._node_vectors.add(rows.node_vectors.keys, rows.node_vectors.matrix)
        self._triple_vectors = EmbeddingTable()
        self._triple_vectors.add(rows.triple_vectors.keys, rows.triple_vectors.matrix)
        self._repair_vectors()
        self._snapshot = GraphSnapshot.build(self._graph, self._node_vectors, self._triple_vectors)

    def _repair_vectors(self) -> None:
        """Embed vectors that are missing, drop orphaned ones (normally a no-op: a change
        writes its vectors with its edges; the old layout could lose some in a crash)."""
        nodes = [(key, str(data.get("name", key))) for key, data in self._graph.nodes(data=True)]
        added_nodes, added_texts = self._embed_missing(nodes, list(self._text_refs))
        dropped_nodes = self._node_vectors.retain(set(self._graph.nodes))
        dropped_texts = self._triple_vectors.retain(set(self._text_refs))
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
