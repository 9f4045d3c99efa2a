"""The knowledge graph: a networkx MultiDiGraph of triples with provenance, kept on disk.

Nodes are keyed by normalized entity name and keep a display name; every edge is one triple
from one document (attributes: predicate, doc_id, chunk_id, source, and the subject/object
surface forms that document used). The graph always mirrors the documents: replacing a
document swaps its edges, removing one drops its edges and then any node left without edges.

Files in the folder, each replaced atomically: ``graph.json`` (node-link JSON; an edge's ends
are named "subject" and "object", its key is "<doc_id>#<position>") and the
embeddings ``node_embeddings.npz`` (by node key) and ``triple_embeddings.npz`` (by triple text).
Embeddings are written first: after a crash between the writes, loading finds at worst a few
vectors too many (dropped) or missing (re-embedded), never a graph it cannot read.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import networkx as nx

from durable import atomic_write, remove_stale_temps
from kg.embeddings import EmbeddingTable, EmbedFn, embed_checked
from kg.index import GraphSnapshot
from kg.models import EntityInfo, Neighbourhood, Triple, triple_text
from kg.normalize import EntityNormalizer, default_normalizer, normalize_predicate

GRAPH_FILE = "graph.json"
NODE_VECTORS_FILE = "node_embeddings.npz"
TRIPLE_VECTORS_FILE = "triple_embeddings.npz"
FORMAT_VERSION = 1

# node-link JSON names an edge's ends "source"/"target" by default, which would collide with
# the edge attribute "source" (supplied | extracted) and silently drop it.
_LINK_ENDS = {"source": "subject", "target": "object"}

EdgeRef = tuple[str, str, str]  # (subject key, object key, edge key)


class KnowledgeGraph:
    """Document-scoped triple store with persisted embeddings; thread-safe.

    ``embed`` is called only for node names and triple texts the graph has never seen (one
    batched call per change). With ``autosave`` every change is saved before it returns.
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
            known = doc_id in self._doc_edges
            if known:
                self.replace_documents({doc_id: []})
            return known

    def replace_documents(self, documents: Mapping[str, Sequence[Triple]]) -> None:
        """Replace several documents' triples in one change (one embed call, one save).

        Every triple must carry the doc_id it is filed under. New node names and triple texts
        are embedded before the graph is touched, so a failing ``embed`` changes nothing.
        """
        prepared = {doc_id: self._prepare(doc_id, ts) for doc_id, ts in documents.items()}
        with self._lock:
            self._embed_missing(
                [
                    (key, t.subject if key == sk else t.object)
                    for rows in prepared.values()
                    for t, sk, _, ok in rows
                    for key in (sk, ok)
                ],
                [t.text for rows in prepared.values() for t, _, _, _ in rows],
            )
            touched: set[str] = set()
            for doc_id, rows in prepared.items():
                touched |= self._drop_edges(doc_id)
                touched |= self._add_edges(doc_id, rows)
            self._settle_nodes(touched)
            self._node_vectors.retain(set(self._graph.nodes))
            self._triple_vectors.retain(set(self._text_refs))
            self._snapshot = GraphSnapshot.build(
                self._graph, self._node_vectors, self._triple_vectors
            )
            if self._autosave:
                self.save()  # after the swap: a failed write leaves memory consistent

    def save(self) -> None:
        """Persist embeddings, then the graph, each atomically."""
        with self._lock:
            self._folder.mkdir(parents=True, exist_ok=True)
            # Unchanged vectors are not rewritten: at 50k triples they are ~80 MB.
            for table, name in (
                (self._node_vectors, NODE_VECTORS_FILE),
                (self._triple_vectors, TRIPLE_VECTORS_FILE),
            ):
                if table.dirty or not (self._folder / name).exists():
                    table.save(self._folder / name)
            payload = {
                "format": FORMAT_VERSION,
                "graph": nx.node_link_data(self._graph, edges="edges", **_LINK_ENDS),
            }
            data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()

            def write(handle: IO[bytes]) -> None:
                handle.write(data)

            atomic_write(self._folder / GRAPH_FILE, write)

    # -- internals ------------------------------------------------------------------------

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

    def _embed_missing(self, nodes: list[tuple[str, str]], texts: list[str]) -> None:
        """Embed, in one call, node names and triple texts that have no vector yet."""
        names = {key: name for key, name in reversed(nodes)}  # first name given wins
        missing_nodes = self._node_vectors.missing(key for key, _ in nodes)
        missing_texts = self._triple_vectors.missing(texts)
        if not missing_nodes and not missing_texts:
            return
        vectors = embed_checked(self._embed, [names[k] for k in missing_nodes] + missing_texts)
        self._node_vectors.add(missing_nodes, vectors[: len(missing_nodes)])
        self._triple_vectors.add(missing_texts, vectors[len(missing_nodes) :])

    def _drop_edges(self, doc_id: str) -> set[str]:
        touched: set[str] = set()
        for u, v, key in self._doc_edges.pop(doc_id, []):
            data = self._graph.edges[u, v, key]
            self._release_text(_edge_text(data))
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

    def _settle_nodes(self, touched: set[str]) -> None:
        """Drop touched nodes left without edges; keep survivors' display names truthful."""
        for node in touched:
            if node not in self._graph:
                continue
            if self._graph.degree(node) == 0:
                self._graph.remove_node(node)
                continue
            forms = self._surface_forms(node)
            if self._graph.nodes[node].get("name") not in forms:
                # The document that named it is gone: take a remaining form, deterministically.
                self._graph.nodes[node]["name"] = min(forms)

    def _surface_forms(self, node: str) -> set[str]:
        forms = {str(d["subject_name"]) for _, _, d in self._graph.out_edges(node, data=True)}
        forms |= {str(d["object_name"]) for _, _, d in self._graph.in_edges(node, data=True)}
        return forms

    def _release_text(self, text: str) -> None:
        self._text_refs[text] -= 1
        if self._text_refs[text] <= 0:
            del self._text_refs[text]

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
            self._load()

    def _load(self) -> None:
        for name in (GRAPH_FILE, NODE_VECTORS_FILE, TRIPLE_VECTORS_FILE):
            remove_stale_temps(self._folder, name)
        path = self._folder / GRAPH_FILE
        if not path.exists():
            return
        payload: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        if payload.get("format") != FORMAT_VERSION:
            raise ValueError(f"{path}: unsupported graph format {payload.get('format')!r}")
        graph = nx.node_link_graph(
            payload["graph"], directed=True, multigraph=True, edges="edges", **_LINK_ENDS
        )
        self._graph = graph
        edges: dict[str, list[tuple[int, EdgeRef]]] = {}
        for u, v, key, data in graph.edges(keys=True, data=True):
            position = int(str(key).rsplit("#", 1)[1])
            edges.setdefault(str(data["doc_id"]), []).append((position, (u, v, str(key))))
            self._text_refs[_edge_text(data)] += 1
        self._doc_edges = {doc: [ref for _, ref in sorted(refs)] for doc, refs in edges.items()}
        self._node_vectors = EmbeddingTable.load(self._folder / NODE_VECTORS_FILE)
        self._triple_vectors = EmbeddingTable.load(self._folder / TRIPLE_VECTORS_FILE)
        self._repair_vectors()
        self._snapshot = GraphSnapshot.build(self._graph, self._node_vectors, self._triple_vectors)

    def _repair_vectors(self) -> None:
        """Re-embed vectors a crash lost, drop ones it orphaned (normally a no-op)."""
        nodes = [(key, str(data.get("name", key))) for key, data in self._graph.nodes(data=True)]
        before = (len(self._node_vectors), len(self._triple_vectors))
        missing = bool(self._node_vectors.missing(k for k, _ in nodes)) or bool(
            self._triple_vectors.missing(self._text_refs)
        )
        self._embed_missing(nodes, list(self._text_refs))
        self._node_vectors.retain(set(self._graph.nodes))
        self._triple_vectors.retain(set(self._text_refs))
        changed = missing or before != (len(self._node_vectors), len(self._triple_vectors))
        if changed and self._autosave:
            self.save()


def _edge_text(data: Mapping[str, Any]) -> str:
    return triple_text(str(data["subject_name"]), str(data["predicate"]), str(data["object_name"]))
