"""What changes edit (``kg.store.KnowledgeGraph`` owns one): each document's edges as the
rows the file stores, each entity's display name and the edges that touch it, and how
many edges state each triple text (a text no edge states loses its vector).

Nodes are keyed by normalized entity name; every edge is one triple from one document.
These are plain dicts of the file's rows rather than a networkx graph: at 323,000
triples the networkx graph took 2.2 KB a triple (an attribute dict per edge, nested
adjacency dicts both ways) and 8 s to build at a start; nothing here needs a graph
algorithm (the snapshot, ``kg.index``, is what queries walk).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

from kg.index import SnapshotChange
from kg.models import EdgeRow, Triple
from kg.normalize import EntityNormalizer, normalize_predicate

#: A triple to file, with its subject, predicate and object keys.
KeyedTriple = tuple[Triple, str, str, str]


def keyed_triples(
    doc_id: str, triples: Sequence[Triple], normalizer: EntityNormalizer
) -> list[KeyedTriple]:
    """(triple, subject key, predicate key, object key), duplicates within the document
    dropped; a triple filed under another document is an error."""
    rows: list[KeyedTriple] = []
    seen: set[tuple[str, str, str, str | None, str]] = set()
    for triple in triples:
        if triple.doc_id != doc_id:
            raise ValueError(f"triple of document {triple.doc_id!r} filed under {doc_id!r}")
        sk = normalizer.normalize(triple.subject)
        pk = normalize_predicate(triple.predicate)
        ok = normalizer.normalize(triple.object)
        identity = (sk, pk, ok, triple.chunk_id, triple.source)
        if identity not in seen:
            seen.add(identity)
            rows.append((triple, sk, pk, ok))
    return rows


class GraphEdits:
    """Documents' edges, entities' names and incident edges, triple texts' counts."""

    def __init__(
        self,
        doc_edges: dict[str, list[EdgeRow]] | None = None,
        names: dict[str, str] | None = None,
        text_refs: Counter[str] | None = None,
    ) -> None:
        self.doc_edges: dict[str, list[EdgeRow]] = {} if doc_edges is None else doc_edges
        self.node_names: dict[str, str] = {} if names is None else names
        self.text_refs: Counter[str] = Counter() if text_refs is None else text_refs
        # Each entity's edges (a self-loop once), in the order they were added: a list
        # rather than a dict by (doc_id, position), which cost 0.3 KB more a triple; a
        # document's removal filters the lists of the entities it touched.
        self.incident: dict[str, list[EdgeRow]] = {}
        for rows in self.doc_edges.values():
            for row in rows:
                self._link(row)

    @classmethod
    def of_rows(cls, edges: Iterable[EdgeRow], names: Mapping[str, str]) -> GraphEdits:
        """From the file's rows (in (doc_id, position) order) and the nodes' names."""
        doc_edges: dict[str, list[EdgeRow]] = {}
        text_refs: Counter[str] = Counter()
        for edge in edges:
            doc_edges.setdefault(edge.doc_id, []).append(edge)
            text_refs[edge.text] += 1
        return cls(doc_edges, dict(names), text_refs)

    def edges(self) -> Iterable[EdgeRow]:
        """Every edge, document by document."""
        return (row for rows in self.doc_edges.values() for row in rows)

    def degree(self, node: str) -> int:
        """Edges touching ``node``, a self-loop twice (as networkx counts)."""
        return sum(2 if r.subject == r.object else 1 for r in self.incident.get(node, ()))

    def names(self, nodes: Iterable[str]) -> dict[str, str]:
        """Display names of those of ``nodes`` still in the graph."""
        return {n: self.node_names[n] for n in nodes if n in self.node_names}

    def snapshot_change(
        self, docs: Collection[str], touched: set[str], removed_nodes: set[str]
    ) -> SnapshotChange:
        """What a change that replaced ``docs`` (and touched, removed these nodes) did,
        for ``GraphSnapshot.apply``."""
        return SnapshotChange(
            removed_docs=set(docs),
            edges=[r for doc_id in docs for r in self.doc_edges.get(doc_id, [])],
            names=self.names(touched),
            removed_nodes=removed_nodes,
        )

    def drop_edges(self, doc_id: str, released: set[str]) -> set[str]:
        """Remove the document's edges; add texts no edge states any more to ``released``."""
        touched: set[str] = set()
        for row in self.doc_edges.pop(doc_id, []):
            text = row.text
            if self._release_text(text):
                released.add(text)
            touched.update((row.subject, row.object))
        for node in touched:
            self.incident[node] = [r for r in self.incident[node] if r.doc_id != doc_id]
        return touched

    def add_edges(self, doc_id: str, rows: list[KeyedTriple]) -> set[str]:
        edges: list[EdgeRow] = []
        touched: set[str] = set()
        for i, (triple, sk, _, ok) in enumerate(rows):
            row = EdgeRow.stored(
                (
                    doc_id,
                    i,
                    sk,
                    ok,
                    triple.predicate,
                    triple.chunk_id,
                    triple.source,
                    triple.subject,
                    triple.object,
                )
            )
            for key, name in ((row.subject, row.subject_name), (row.object, row.object_name)):
                self.node_names.setdefault(key, name)
            self._link(row)
            self.text_refs[triple.text] += 1
            edges.append(row)
            touched.update((sk, ok))
        if edges:
            self.doc_edges[doc_id] = edges
        return touched

    def settle_nodes(self, touched: set[str]) -> set[str]:
        """Drop touched nodes left without edges (returned); keep survivors' display
        names truthful."""
        removed: set[str] = set()
        for node in touched:
            if node not in self.node_names:
                continue
            if not self.incident.get(node):
                del self.node_names[node]
                self.incident.pop(node, None)
                removed.add(node)
                continue
            forms = self._surface_forms(node)
            if self.node_names[node] not in forms:
                # The document that named it is gone: take a remaining form, deterministically.
                self.node_names[node] = min(forms)
        return removed

    def _link(self, row: EdgeRow) -> None:
        self.incident.setdefault(row.subject, []).append(row)
        if row.object != row.subject:
            self.incident.setdefault(row.object, []).append(row)

    def _surface_forms(self, node: str) -> set[str]:
        forms: set[str] = set()
        for row in self.incident[node]:
            if row.subject == node:
                forms.add(row.subject_name)
            if row.object == node:
                forms.add(row.object_name)
        return forms

    def _release_text(self, text: str) -> bool:
        """One edge fewer states ``text``; True when none does any more."""
        self.text_refs[text] -= 1
        if self.text_refs[text] <= 0:
            del self.text_refs[text]
            return True
        return False
