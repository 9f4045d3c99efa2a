"""Read views of what changes edit (``kg.edits``) for operators (the console's entity
search and an entity's neighbourhood); ``KnowledgeGraph`` calls them under its lock."""

from __future__ import annotations

from kg.edits import GraphEdits
from kg.models import EdgeRow, EntityInfo, Neighbourhood, Triple
from kg.normalize import EntityNormalizer


def edge_triple(row: EdgeRow) -> Triple:
    """The triple an edge states."""
    return Triple(
        subject=row.subject_name,
        predicate=row.predicate,
        object=row.object_name,
        doc_id=row.doc_id,
        chunk_id=row.chunk_id,
        source="extracted" if row.source == "extracted" else "supplied",
    )


def search_entities(
    edits: GraphEdits, normalizer: EntityNormalizer, q: str, limit: int
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
    for key, name in edits.node_names.items():
        haystacks = (key, name.lower())
        if needle and not any(needle in h or key_needle in h for h in haystacks):
            continue
        if needle and (key == key_needle or name.lower() == needle):
            rank = 0
        elif needle and any(h.startswith((needle, key_needle)) for h in haystacks):
            rank = 1
        else:
            rank = 2
        ranked.append((rank, -edits.degree(key), key, name))
    ranked.sort()
    return [EntityInfo(key=k, name=n, degree=-d) for _, d, k, n in ranked[:limit]]


def around(
    edits: GraphEdits, normalizer: EntityNormalizer, name: str, limit: int
) -> Neighbourhood | None:
    """The entity called ``name`` (any surface form its key normalizes to) and up to
    ``limit`` of its triples, outgoing first, each list sorted by predicate, subject,
    object and document; None if the graph has no such entity."""
    key = normalizer.normalize(name)

    def order(t: Triple) -> tuple[str, str, str, str]:
        return (t.predicate, t.subject, t.object, t.doc_id)

    if key not in edits.node_names:
        return None
    rows = list(edits.incident.get(key, ()))
    outgoing = sorted((edge_triple(r) for r in rows if r.subject == key), key=order)
    incoming = sorted((edge_triple(r) for r in rows if r.object == key != r.subject), key=order)
    entity = EntityInfo(key=key, name=edits.node_names[key], degree=edits.degree(key))
    return Neighbourhood(
        entity=entity,
        outgoing=outgoing[:limit],
        incoming=incoming[: max(0, limit - len(outgoing))],
        total=len(outgoing) + len(incoming),
    )
