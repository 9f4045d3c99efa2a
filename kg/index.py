"""An immutable, array-based view of the graph built for fast subgraph selection.

networkx is the store's source of truth, but walking its dicts and sorting edges per query
would cost milliseconds. After each change the store builds one ``GraphSnapshot`` (at a
start, from the file's rows, before the networkx graph exists): nodes and
edges in a canonical order (so results never depend on insertion history), adjacency in CSR
form, per-chunk edge lists and contiguous embedding matrices. Queries read a snapshot without
locks; a change swaps in a new one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from kg.embeddings import EmbeddingTable
from kg.models import triple_text
from kg.normalize import normalize_predicate

_EMPTY_INT = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class GraphSnapshot:
    """Read-only arrays describing the graph at one moment (see module docstring)."""

    node_keys: list[str] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)
    node_index: dict[str, int] = field(default_factory=dict)
    node_vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    edge_subject: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    edge_object: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    edge_subject_name: list[str] = field(default_factory=list)
    edge_predicate: list[str] = field(default_factory=list)
    edge_object_name: list[str] = field(default_factory=list)
    edge_text: list[str] = field(default_factory=list)
    edge_doc: list[str] = field(default_factory=list)
    edge_chunk: list[str | None] = field(default_factory=list)
    edge_source: list[str] = field(default_factory=list)
    # Edges with the same normalized (subject, predicate, object) share a group: one fact
    # stated by several documents is offered once.
    edge_group: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    edge_vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    adjacency_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    adjacency_edges: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    chunk_edges: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    document_edges: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def edge_count(self) -> int:
        """Number of edges (triples) in the snapshot."""
        return len(self.edge_text)

    def document_ids(self) -> list[str]:
        """Ids of the documents that state at least one edge, sorted."""
        return sorted({doc for doc, _ in self.chunk_edges} | set(self.document_edges))

    def document_entities(self, doc_ids: Sequence[str]) -> set[str]:
        """Keys of the entities the edges of these documents join."""
        found = [self.document_edges[d] for d in doc_ids if d in self.document_edges]
        if not found:
            return set()
        edges = np.concatenate(found)
        nodes = np.unique(np.concatenate([self.edge_subject[edges], self.edge_object[edges]]))
        return {self.node_keys[int(n)] for n in nodes}

    def document_edge_vectors(self, doc_ids: Sequence[str]) -> np.ndarray:
        """(n, dim) vectors of the edges these documents state (none: an empty array)."""
        found = [self.document_edges[d] for d in doc_ids if d in self.document_edges]
        edges = np.concatenate(found) if found else _EMPTY_INT
        if not edges.size or not self.edge_vectors.size:
            return np.zeros((0, 0), np.float32)
        return np.asarray(self.edge_vectors[edges], dtype=np.float32)

    def incident(self, node: int) -> np.ndarray:
        """Edge indices touching ``node`` (either direction), ascending."""
        return self.adjacency_edges[self.adjacency_ptr[node] : self.adjacency_ptr[node + 1]]

    @classmethod
    def build(
        cls, graph: nx.MultiDiGraph, nodes: EmbeddingTable, triples: EmbeddingTable
    ) -> GraphSnapshot:
        """Index ``graph`` with vectors from the node and triple embedding tables."""
        names = {key: str(data.get("name", key)) for key, data in graph.nodes(data=True)}
        return cls.build_from(graph.edges(keys=True, data=True), names, nodes, triples)

    @classmethod
    def build_from(
        cls,
        edges: Iterable[tuple[str, str, str, Mapping[str, Any]]],
        names: Mapping[str, str],
        nodes: EmbeddingTable,
        triples: EmbeddingTable,
    ) -> GraphSnapshot:
        """Index ``edges`` ((subject, object, key, attributes) as the graph holds them)
        between the nodes of ``names`` (key to display name), with their vectors: a start
        builds the snapshot from the file's rows this way, before the graph itself."""
        if not names:
            return cls()
        node_keys = sorted(names)
        node_index = {key: i for i, key in enumerate(node_keys)}
        node_names = [names[key] for key in node_keys]

        rows = []
        # Few distinct predicates, many edges: normalizing each edge's took a third of
        # the build at 100,000 triples.
        predicate_keys: dict[str, str] = {}
        for u, v, key, data in edges:
            chunk = data.get("chunk_id")
            predicate = str(data["predicate"])
            predicate_key = predicate_keys.get(predicate)
            if predicate_key is None:
                predicate_key = predicate_keys[predicate] = normalize_predicate(predicate)
            rows.append(
                (
                    u,
                    predicate_key,
                    v,
                    str(data["doc_id"]),
                    chunk or "",
                    str(key),
                    predicate,
                    data,
                    chunk,
                )
            )
        rows.sort(key=lambda r: r[:6])

        subject = np.fromiter((node_index[r[0]] for r in rows), np.int64, len(rows))
        obj = np.fromiter((node_index[r[2]] for r in rows), np.int64, len(rows))
        group = np.zeros(len(rows), np.int64)
        for i in range(1, len(rows)):
            same = rows[i][:3] == rows[i - 1][:3]
            group[i] = group[i - 1] if same else group[i - 1] + 1
        subject_names = [str(r[7]["subject_name"]) for r in rows]
        object_names = [str(r[7]["object_name"]) for r in rows]
        predicates = [r[6] for r in rows]
        texts = [
            triple_text(s, p, o)
            for s, p, o in zip(subject_names, predicates, object_names, strict=True)
        ]

        edge_doc = [r[3] for r in rows]
        edge_chunk = [r[8] for r in rows]
        chunk_edges, document_edges = edge_lists(edge_doc, edge_chunk)
        return cls(
            node_keys=node_keys,
            node_names=node_names,
            node_index=node_index,
            node_vectors=nodes.gather(node_keys),
            edge_subject=subject,
            edge_object=obj,
            edge_subject_name=subject_names,
            edge_predicate=predicates,
            edge_object_name=object_names,
            edge_text=texts,
            edge_doc=edge_doc,
            edge_chunk=edge_chunk,
            edge_source=[str(r[7].get("source", "supplied")) for r in rows],
            edge_group=group,
            edge_vectors=triples.gather(texts),
            **_csr(subject, obj, len(node_keys)),
            chunk_edges=chunk_edges,
            document_edges=document_edges,
        )


def edge_lists(
    edge_doc: Sequence[str], edge_chunk: Sequence[str | None]
) -> tuple[dict[tuple[str, str], np.ndarray], dict[str, np.ndarray]]:
    """``chunk_edges`` and ``document_edges`` (edges without a chunk) of the edges."""
    chunk_lists: dict[tuple[str, str], list[int]] = defaultdict(list)
    doc_lists: dict[str, list[int]] = defaultdict(list)
    for i, (doc, chunk) in enumerate(zip(edge_doc, edge_chunk, strict=True)):
        if chunk is None:
            doc_lists[doc].append(i)
        else:
            chunk_lists[(doc, str(chunk))].append(i)
    return (
        {k: np.array(v, np.int64) for k, v in chunk_lists.items()},
        {k: np.array(v, np.int64) for k, v in doc_lists.items()},
    )


def _csr(subject: np.ndarray, obj: np.ndarray, node_count: int) -> dict[str, np.ndarray]:
    """Adjacency (both directions) as CSR: edges of node n are edges[ptr[n]:ptr[n+1]]."""
    edge_ids = np.arange(len(subject), dtype=np.int64)
    loops = subject == obj  # a self-loop is listed once, not twice
    nodes = np.concatenate([subject, obj[~loops]])
    edges = np.concatenate([edge_ids, edge_ids[~loops]])
    order = np.lexsort((edges, nodes))
    counts = np.bincount(nodes, minlength=node_count)
    ptr = np.zeros(node_count + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return {"adjacency_ptr": ptr, "adjacency_edges": edges[order]}
