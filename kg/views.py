"""Read views of the graph's snapshot for operators and the store: a document's triples,
the console's entity search and an entity's neighbourhood, and the file's rows again
(``KnowledgeGraph.save``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kg.index import GraphSnapshot
from kg.models import EdgeRow, EntityInfo, Neighbourhood, Triple
from kg.normalize import EntityNormalizer


def edge_triple(snap: GraphSnapshot, edge: int) -> Triple:
    """The triple edge ``edge`` states."""
    return Triple(
        subject=snap.edge_subject_name[edge],
        predicate=snap.edge_predicate[edge],
        object=snap.edge_object_name[edge],
        doc_id=snap.edge_doc[edge],
        chunk_id=snap.edge_chunk[edge],
        source="extracted" if snap.edge_source[edge] == "extracted" else "supplied",
    )


def edge_row(snap: GraphSnapshot, edge: int) -> EdgeRow:
    """Edge ``edge`` as the file stores it."""
    return EdgeRow(
        doc_id=snap.edge_doc[edge],
        position=int(snap.edge_position[edge]),
        subject=snap.node_keys[snap.edge_subject[edge]],
        object=snap.node_keys[snap.edge_object[edge]],
        predicate=snap.edge_predicate[edge],
        chunk_id=snap.edge_chunk[edge],
        source=snap.edge_source[edge],
        subject_name=snap.edge_subject_name[edge],
        object_name=snap.edge_object_name[edge],
    )


def stored_rows(snap: GraphSnapshot) -> Iterator[EdgeRow]:
    """Every edge as the file stores it."""
    return (edge_row(snap, edge) for edge in range(snap.edge_count))


def document_triples(snap: GraphSnapshot, doc_id: str) -> list[Triple]:
    """The document's triples in the order they were given (empty if unknown)."""
    edges = snap.document_edges([doc_id])
    edges = edges[np.argsort(snap.edge_position[edges], kind="stable")]
    return [edge_triple(snap, edge) for edge in edges.tolist()]


def degrees(snap: GraphSnapshot) -> np.ndarray:
    """Each entity's count of edges, a self-loop twice (as networkx counts)."""
    loops = snap.edge_subject[snap.edge_subject == snap.edge_object]
    return np.diff(snap.adjacency_ptr) + np.bincount(loops, minlength=len(snap.node_keys))


def search_entities(
    snap: GraphSnapshot, normalizer: EntityNormalizer, q: str, limit: int
) -> list[EntityInfo]:
    """Entities whose key or display name contains ``q`` (case-insensitive).

    Exact matches first, then prefix matches, then the rest; within each, higher degree
    first, then key. An empty ``q`` lists the best-connected entities.
    """
    if limit <= 0:
        return []
    needle = " ".join(q.lower().split())
    key_needle = normalizer.normalize(needle) if needle else ""
    degree = degrees(snap).tolist()
    ranked: list[tuple[int, int, str, str]] = []
    for node, (key, name) in enumerate(zip(snap.node_keys, snap.node_names, strict=True)):
        haystacks = (key, name.lower())
        if needle and not any(needle in h or key_needle in h for h in haystacks):
            continue
        if needle and (key == key_needle or name.lower() == needle):
            rank = 0
        elif needle and any(h.startswith((needle, key_needle)) for h in haystacks):
            rank = 1
        else:
            rank = 2
        ranked.append((rank, -degree[node], key, name))
    ranked.sort()
    return [EntityInfo(key=k, name=n, degree=-d) for _, d, k, n in ranked[:limit]]


def around(
    snap: GraphSnapshot, normalizer: EntityNormalizer, name: str, limit: int
) -> Neighbourhood | None:
    """The entity called ``name`` (any surface form its key normalizes to) and up to
    ``limit`` of its triples, outgoing first, each list sorted by predicate, subject,
    object and document; None if the graph has no such entity."""
    key = normalizer.normalize(name)
    node = snap.node_position(key)
    if node is None:
        return None

    def order(t: Triple) -> tuple[str, str, str, str]:
        return (t.predicate, t.subject, t.object, t.doc_id)

    edges = snap.incident(node)
    subject, obj = snap.edge_subject[edges], snap.edge_object[edges]
    outgoing = sorted((edge_triple(snap, e) for e in edges[subject == node].tolist()), key=order)
    incoming_edges = edges[(obj == node) & (subject != node)].tolist()
    incoming = sorted((edge_triple(snap, e) for e in incoming_edges), key=order)
    degree = len(edges) + int(np.count_nonzero((subject == node) & (obj == node)))
    return Neighbourhood(
        entity=EntityInfo(key=key, name=snap.node_names[node], degree=degree),
        outgoing=outgoing[:limit],
        incoming=incoming[: max(0, limit - len(outgoing))],
        total=len(outgoing) + len(incoming),
    )
