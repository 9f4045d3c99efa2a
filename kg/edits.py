"""What a change does to the graph, planned from the snapshot it changes.

A change replaces some documents' edges. Its effects on the rest of the graph follow from
the current ``GraphSnapshot`` (``kg.index``) and the new rows alone: which entities it
touches, which are left without edges (gone), which display names stop being true, and
which triple texts no edge states any more (their vectors go). So the snapshot is the
graph's only state in memory; there is no second, editable copy of it.

There was one until this module planned changes: each document's edges as ``EdgeRow``
objects, each entity's incident edges and name, each text's count of edges. At 1,000,000
chunks (3.2 million edges, 2.1 million entities) it held about 0.9 GiB beside the
snapshot, and a start after a clean stop rebuilt it by reading every row of the graph's
file at its first change (94-103 s).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kg.index import GraphSnapshot, SnapshotChange
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


def edge_rows(documents: Mapping[str, Sequence[KeyedTriple]]) -> list[EdgeRow]:
    """The rows the file stores for these documents' triples, document by document."""
    return [
        EdgeRow.stored(
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
        for doc_id, rows in documents.items()
        for i, (triple, sk, _, ok) in enumerate(rows)
    ]


@dataclass(frozen=True)
class GraphEdit:
    """One change, planned (``plan``): what the snapshot applies and what the embedding
    tables drop."""

    change: SnapshotChange
    released: set[str] = field(default_factory=set)
    """Triple texts that no edge states after the change."""

    @property
    def touched(self) -> set[str]:
        """Entities the change touched: those that remain and those gone."""
        return {*self.change.names, *self.change.removed_nodes}


def plan(snap: GraphSnapshot, documents: Mapping[str, Sequence[KeyedTriple]]) -> GraphEdit:
    """The change that replaces ``documents``' edges (an empty list: the document's go).

    An entity keeps its display name while an edge still names it so; one the graph did
    not have takes the first name the new rows give it (document by document, a row's
    subject before its object); one whose name no remaining edge uses takes the least of
    the names they use. An entity left without edges is gone."""
    rows = edge_rows(documents)
    dropped = snap.document_edges(list(documents))
    gone = np.zeros(snap.edge_count, bool)
    gone[dropped] = True
    first_names: dict[str, str] = {}
    new_forms: dict[str, set[str]] = {}
    for row in rows:
        for key, name in ((row.subject, row.subject_name), (row.object, row.object_name)):
            first_names.setdefault(key, name)
            new_forms.setdefault(key, set()).add(name)
    ends = np.unique(np.concatenate([snap.edge_subject[dropped], snap.edge_object[dropped]]))
    touched = {snap.node_keys[n] for n in ends.tolist()} | set(first_names)
    names: dict[str, str] = {}
    removed: set[str] = set()
    for key in touched:
        at = snap.node_position(key)
        forms = new_forms.get(key, set())
        if at is not None:
            forms = forms | set(_surface_forms(snap, at, gone))
        if not forms:  # only a node the graph had can be left without edges
            removed.add(key)
            continue
        name = snap.node_names[at] if at is not None else first_names[key]
        names[key] = name if name in forms else min(forms)
    return GraphEdit(
        SnapshotChange(removed_docs=set(documents), edges=rows, names=names, removed_nodes=removed),
        _released(snap, dropped, gone, {row.text for row in rows}),
    )


def _surface_forms(snap: GraphSnapshot, node: int, gone: np.ndarray) -> Iterator[str]:
    """The names the edges of ``node`` that stay give it."""
    edges = snap.incident(node)
    edges = edges[~gone[edges]]
    for edge in edges[snap.edge_subject[edges] == node].tolist():
        yield snap.edge_subject_name[edge]
    for edge in edges[snap.edge_object[edges] == node].tolist():
        yield snap.edge_object_name[edge]


def _released(
    snap: GraphSnapshot, dropped: np.ndarray, gone: np.ndarray, restated: set[str]
) -> set[str]:
    """Texts of the ``dropped`` edges that neither an edge that stays nor a new one
    (``restated``) states. Edges that state one text share its vector row, so the rows
    tell, in one pass of numpy over the edges, without a count kept per text."""
    if not dropped.size:
        return set()
    rows = snap.edge_vectors.rows
    dropped_rows = rows[dropped]
    wanted = np.zeros(int(rows.max()) + 1, bool)
    wanted[dropped_rows] = True
    kept = rows[~gone]
    stated = np.zeros_like(wanted)
    stated[kept[wanted[kept]]] = True
    return {
        snap.edge_text[edge]
        for edge, row in zip(dropped.tolist(), dropped_rows.tolist(), strict=True)
        if not stated[row]
    } - restated
