"""Read views of the networkx graph for operators (the console's entity search and an
entity's neighbourhood); ``KnowledgeGraph`` calls them under its lock."""

from __future__ import annotations

import networkx as nx

from kg.graph_file import EdgeRef
from kg.models import EntityInfo, Neighbourhood, Triple
from kg.normalize import EntityNormalizer


def edge_triple(graph: nx.MultiDiGraph, ref: EdgeRef) -> Triple:
    """The triple an edge of ``graph`` states."""
    data = graph.edges[ref]
    return Triple(
        subject=data["subject_name"],
        predicate=data["predicate"],
        object=data["object_name"],
        doc_id=data["doc_id"],
        chunk_id=data.get("chunk_id"),
        source=data.get("source", "supplied"),
    )


def search_entities(
    graph: nx.MultiDiGraph, normalizer: EntityNormalizer, q: str, limit: int
) -> list[EntityInfo]:
    """Entities whose key or display name contains ``q`` (case-insensitive).

    Exact matches first, then prefix matches, then the rest; within each, higher degree
    first, then key. An empty ``q`` lists the best-connected entities.
    """
    if limit <= 0:
        return []
    needle = " ".join(q.lower().split())
    key_needle = normalizer.normalize(needle) if needle else ""
    ranked: list[tuple[int, int, str, str]] = []
    for key, data in graph.nodes(data=True):
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
        ranked.append((rank, -int(graph.degree(key)), key, name))
    ranked.sort()
    return [EntityInfo(key=k, name=n, degree=-d) for _, d, k, n in ranked[:limit]]


def around(
    graph: nx.MultiDiGraph, normalizer: EntityNormalizer, name: str, limit: int
) -> Neighbourhood | None:
    """The entity called ``name`` (any surface form its key normalizes to) and up to
    ``limit`` of its triples, outgoing first, each list sorted by predicate, subject,
    object and document; None if the graph has no such entity."""
    key = normalizer.normalize(name)

    def order(t: Triple) -> tuple[str, str, str, str]:
        return (t.predicate, t.subject, t.object, t.doc_id)

    if key not in graph:
        return None
    out_refs = list(graph.out_edges(key, keys=True))
    in_refs = [r for r in graph.in_edges(key, keys=True) if r[0] != key]
    outgoing = sorted((edge_triple(graph, r) for r in out_refs), key=order)
    incoming = sorted((edge_triple(graph, r) for r in in_refs), key=order)
    node = graph.nodes[key]
    entity = EntityInfo(key=key, name=str(node.get("name", key)), degree=int(graph.degree(key)))
    return Neighbourhood(
        entity=entity,
        outgoing=outgoing[:limit],
        incoming=incoming[: max(0, limit - len(outgoing))],
        total=len(outgoing) + len(incoming),
    )
