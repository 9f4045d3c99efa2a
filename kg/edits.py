"""The networkx graph that changes edit (``kg.store.KnowledgeGraph`` owns one).

Nodes are keyed by normalized entity name and keep a display name; every edge is one
triple from one document. Besides the graph: each document's edges in the order given,
and how many edges state each triple text (a text no edge states loses its vector).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import networkx as nx

from kg.graph_file import EdgeRef
from kg.index import SnapshotChange
from kg.models import Triple, triple_text


class GraphEdits:
    """The graph, its documents' edges and its triple texts' reference counts."""

    def __init__(
        self,
        graph: nx.MultiDiGraph | None = None,
        doc_edges: dict[str, list[EdgeRef]] | None = None,
        text_refs: Counter[str] | None = None,
    ) -> None:
        self.graph = nx.MultiDiGraph() if graph is None else graph
        self.doc_edges: dict[str, list[EdgeRef]] = {} if doc_edges is None else doc_edges
        self.text_refs: Counter[str] = Counter() if text_refs is None else text_refs

    def names(self, nodes: Iterable[str]) -> dict[str, str]:
        """Display names of those of ``nodes`` still in the graph."""
        return {n: str(self.graph.nodes[n].get("name", n)) for n in nodes if n in self.graph}

    def snapshot_change(
        self, docs: Collection[str], touched: set[str], removed_nodes: set[str]
    ) -> SnapshotChange:
        """What a change that replaced ``docs`` (and touched, removed these nodes) did,
        for ``GraphSnapshot.apply``."""
        return SnapshotChange(
            removed_docs=set(docs),
            edges=[
                (u, v, key, self.graph.edges[u, v, key])
                for doc_id in docs
                for u, v, key in self.doc_edges.get(doc_id, [])
            ],
            names=self.names(touched),
            removed_nodes=removed_nodes,
        )

    def drop_edges(self, doc_id: str, released: set[str]) -> set[str]:
        """Remove the document's edges; add texts no edge states any more to ``released``."""
        touched: set[str] = set()
        for u, v, key in self.doc_edges.pop(doc_id, []):
            data = self.graph.edges[u, v, key]
            text = _edge_text(data)
            if self._release_text(text):
                released.add(text)
            self.graph.remove_edge(u, v, key)
            touched.update((u, v))
        return touched

    def add_edges(self, doc_id: str, rows: list[tuple[Triple, str, str, str]]) -> set[str]:
        refs: list[EdgeRef] = []
        touched: set[str] = set()
        for i, (triple, sk, _, ok) in enumerate(rows):
            for key, name in ((sk, triple.subject), (ok, triple.object)):
                if key not in self.graph:
                    self.graph.add_node(key, name=name)
            edge_key = f"{doc_id}#{i}"
            self.graph.add_edge(
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
            self.text_refs[triple.text] += 1
            refs.append((sk, ok, edge_key))
            touched.update((sk, ok))
        if refs:
            self.doc_edges[doc_id] = refs
        return touched

    def settle_nodes(self, touched: set[str]) -> set[str]:
        """Drop touched nodes left without edges (returned); keep survivors' display
        names truthful."""
        removed: set[str] = set()
        for node in touched:
            if node not in self.graph:
                continue
            if self.graph.degree(node) == 0:
                self.graph.remove_node(node)
                removed.add(node)
                continue
            forms = self._surface_forms(node)
            if self.graph.nodes[node].get("name") not in forms:
                # The document that named it is gone: take a remaining form, deterministically.
                self.graph.nodes[node]["name"] = min(forms)
        return removed

    def _surface_forms(self, node: str) -> set[str]:
        forms = {str(d["subject_name"]) for _, _, d in self.graph.out_edges(node, data=True)}
        forms |= {str(d["object_name"]) for _, _, d in self.graph.in_edges(node, data=True)}
        return forms

    def _release_text(self, text: str) -> bool:
        """One edge fewer states ``text``; True when none does any more."""
        self.text_refs[text] -= 1
        if self.text_refs[text] <= 0:
            del self.text_refs[text]
            return True
        return False


def _edge_text(data: Mapping[str, Any]) -> str:
    return triple_text(str(data["subject_name"]), str(data["predicate"]), str(data["object_name"]))
