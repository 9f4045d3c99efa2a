"""An immutable, array-based view of the graph built for fast subgraph selection.

The graph's file (``kg.graph_file``) is its source of truth, but walking its rows and
sorting edges per query would cost milliseconds. The store keeps one ``GraphSnapshot``:
nodes and edges in a canonical order (so results never depend on insertion history),
adjacency in CSR form, per-chunk edge lists (``kg.edge_lists``) and the vectors as rows
of the embedding tables (``VectorRows``, no copies). Queries read a snapshot without
locks; a change swaps in a new one.

A start after a crash builds it whole (``build_from``, from the file's rows); one after a
clean stop reads it back (``kg.snapshot_file``). A change, planned from it
(``kg.edits``), patches it (``apply``): rebuilt whole, one document's
change took 8.6 s of its 10.6 s at 323,000 triples, all of it Python work per edge; the
patch does Python work per changed edge and array copies for the rest. Both give the same
snapshot (``tests/kg/test_snapshot_apply.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kg.edge_lists import ChunkIndex
from kg.embeddings import EmbeddingTable
from kg.models import EdgeRow
from kg.normalize import normalize_predicate
from kg.numbering import INDEX
from kg.saved_strings import Splice, StringIndexes
from kg.vector_rows import VectorRows

_EMPTY_INT = np.zeros(0, dtype=INDEX)


def _no_vectors() -> VectorRows:
    return VectorRows(np.zeros((0, 0), np.float32), _EMPTY_INT)


@dataclass(frozen=True)
class SnapshotChange:
    """What one change did to the graph, as ``GraphSnapshot.apply`` takes it."""

    removed_docs: Collection[str]
    """Documents whose edges all went (a replaced document's included)."""
    edges: Sequence[EdgeRow]
    """The edges the change added."""
    names: Mapping[str, str]
    """Display names of the nodes the change touched that remain (new ones included)."""
    removed_nodes: Collection[str]
    """Nodes the change left without edges, gone."""


@dataclass(frozen=True)
class GraphSnapshot:
    """Read-only arrays describing the graph at one moment (see module docstring)."""

    node_keys: list[str] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)
    node_vectors: VectorRows = field(default_factory=_no_vectors)
    edge_subject: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    edge_object: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    # Normalized predicates, numbered: edges are ordered, and grouped, by them.
    edge_predicate_id: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    # Each edge's position among its document's edges (its key is "<doc>#<position>").
    edge_position: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    predicate_keys: list[str] = field(default_factory=list)
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
    edge_vectors: VectorRows = field(default_factory=_no_vectors)
    adjacency_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, INDEX))
    adjacency_edges: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    chunks: ChunkIndex = field(default_factory=ChunkIndex)
    # The ``INDEXED_LISTS`` as the snapshot file saves them, kept in step by ``apply``
    # (None: not kept, as after a build from the rows; a save then looks them up).
    strings: StringIndexes | None = None

    @classmethod
    def empty(cls) -> GraphSnapshot:
        """A snapshot of no graph, whose changes keep its strings' indexes."""
        return cls(strings=StringIndexes.of({name: [] for name in INDEXED_LISTS}))

    @property
    def edge_count(self) -> int:
        """Number of edges (triples) in the snapshot."""
        return len(self.edge_text)

    def node_position(self, key: str) -> int | None:
        """The number of node ``key`` (its place in ``node_keys``, which is sorted), or
        None. A search, not a dict: at 628,367 entities a dict of them held 31 MiB, and
        each change built another beside it (a question looks up a few dozen keys)."""
        at = bisect_left(self.node_keys, key)
        return at if at < len(self.node_keys) and self.node_keys[at] == key else None

    def document_ids(self) -> list[str]:
        """Ids of the documents that state at least one edge, sorted."""
        return sorted(self.chunks.documents)

    def document_entities(self, doc_ids: Sequence[str]) -> set[str]:
        """Keys of the entities the edges of these documents join."""
        edges = self.document_edges(doc_ids)
        if not edges.size:
            return set()
        nodes = np.unique(np.concatenate([self.edge_subject[edges], self.edge_object[edges]]))
        return {self.node_keys[int(n)] for n in nodes}

    def document_edge_vectors(self, doc_ids: Sequence[str]) -> np.ndarray:
        """(n, dim) vectors of the edges these documents state (none: an empty array)."""
        edges = self.document_edges(doc_ids)
        if not edges.size or not self.edge_vectors.size:
            return np.zeros((0, 0), np.float32)
        return np.asarray(self.edge_vectors[edges], dtype=np.float32)

    def with_vectors(self, nodes: EmbeddingTable, triples: EmbeddingTable) -> GraphSnapshot:
        """The same snapshot with its vectors taken from these tables (holding every key)."""
        return replace(
            self,
            node_vectors=VectorRows.of(nodes, self.node_keys),
            edge_vectors=VectorRows.of(triples, self.edge_text),
        )

    def bound_to(self, nodes: EmbeddingTable, triples: EmbeddingTable) -> GraphSnapshot:
        """The same snapshot, its vectors read through these tables, which hold its keys
        at the rows its vectors have (tables that adopted ``kg.snapshot_file.
        table_vectors`` of it): no key is looked up, and a change applied to it splices
        the rows instead of looking up every key again (4.6 s at 1,000,000 chunks)."""
        return replace(
            self,
            node_vectors=VectorRows(nodes.matrix, self.node_vectors.rows, nodes.token),
            edge_vectors=VectorRows(triples.matrix, self.edge_vectors.rows, triples.token),
        )

    def incident(self, node: int) -> np.ndarray:
        """Edge indices touching ``node`` (either direction), ascending."""
        return self.adjacency_edges[self.adjacency_ptr[node] : self.adjacency_ptr[node + 1]]

    def document_edges(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The edges these documents state: each document's, ascending, in turn."""
        found = [self.chunks.document(d) for d in dict.fromkeys(doc_ids)]
        return np.concatenate(found) if found else _EMPTY_INT

    @classmethod
    def build_from(
        cls,
        edges: Iterable[EdgeRow],
        names: Mapping[str, str],
        nodes: EmbeddingTable,
        triples: EmbeddingTable,
    ) -> GraphSnapshot:
        """Index ``edges`` between the nodes of ``names`` (key to display name), with their
        vectors: a start builds the snapshot from the file's rows this way."""
        if not names:
            return cls.empty()
        node_keys = sorted(names)
        node_index = {key: i for i, key in enumerate(node_keys)}  # while building only
        # Each edge's text as the triple table's own key object, not a second copy: 46 MiB
        # at 323,000 triples, held as long as the snapshot.
        texts = {text: text for text in triples}
        rows = _edge_rows(edges, texts)
        del texts
        rows.sort(key=lambda r: r[:6])
        predicate_ids: dict[str, int] = {}
        pid = np.fromiter(
            (predicate_ids.setdefault(r[1], len(predicate_ids)) for r in rows), INDEX, len(rows)
        )
        subject = np.fromiter((node_index[r[0]] for r in rows), INDEX, len(rows))
        obj = np.fromiter((node_index[r[2]] for r in rows), INDEX, len(rows))
        del node_index
        lists: dict[str, Any] = _edge_lists(rows)
        return cls(
            node_keys=node_keys,
            node_names=[names[key] for key in node_keys],
            node_vectors=VectorRows.of(nodes, node_keys),
            edge_subject=subject,
            edge_object=obj,
            edge_predicate_id=pid,
            edge_position=np.fromiter((r[5] for r in rows), INDEX, len(rows)),
            predicate_keys=list(predicate_ids),
            edge_group=_groups(subject, pid, obj),
            edge_vectors=VectorRows.of(triples, lists["edge_text"]),
            **_csr(subject, obj, len(node_keys)),
            chunks=ChunkIndex.of(lists["edge_doc"], lists["edge_chunk"]),
            **lists,
        )

    def apply(
        self, change: SnapshotChange, nodes: EmbeddingTable, triples: EmbeddingTable
    ) -> GraphSnapshot:
        """The snapshot after ``change``, equal to ``build`` on the changed graph."""
        # Nodes: drop the removed, insert the new at their place in key order.
        found = {k: self.node_position(k) for k in {*change.removed_nodes, *change.names}}
        gone = sorted(n for k in change.removed_nodes if (n := found[k]) is not None)
        kept_keys = _without(self.node_keys, gone)
        new_keys = sorted(k for k in change.names if found[k] is None)
        slots = [bisect_left(kept_keys, k) for k in new_keys]
        node_keys = _with(kept_keys, slots, new_keys)
        node_names_new = [change.names[k] for k in new_keys]
        node_names = _with(_without(self.node_names, gone), slots, node_names_new)
        # The nodes the change names, numbered in the new order (a few: searched, not mapped).
        node_index = {key: bisect_left(node_keys, key) for key in change.names}
        for key, name in change.names.items():
            node_names[node_index[key]] = name
        keep_node = np.ones(len(self.node_keys), bool)
        keep_node[gone] = False
        kept = np.arange(len(kept_keys), dtype=INDEX)
        renumber = np.full(len(self.node_keys), -1, INDEX)
        renumber[keep_node] = kept + np.searchsorted(np.asarray(slots, INDEX), kept, "right")

        # Edges: drop the removed documents', insert the added at their canonical place.
        gone_edges = np.unique(self.document_edges(list(change.removed_docs)))
        keep = np.ones(self.edge_count, bool)
        keep[gone_edges] = False
        subject = renumber[self.edge_subject[keep]]
        obj = renumber[self.edge_object[keep]]
        if (subject < 0).any() or (obj < 0).any():
            raise ValueError("the change removed a node that kept edges")
        pid = self.edge_predicate_id[keep]
        position = self.edge_position[keep]
        drop = gone_edges.tolist()
        lists: dict[str, Any] = {name: _without(getattr(self, name), drop) for name in EDGE_LISTS}
        predicate_keys = list(self.predicate_keys)
        predicate_ids = {key: i for i, key in enumerate(predicate_keys)}
        rows = _edge_rows(change.edges, {})
        rows.sort(key=lambda r: r[:6])

        def canonical(i: int) -> tuple[str, str, str, str, str, int]:
            chunk = lists["edge_chunk"][i]
            return (
                node_keys[subject[i]],
                predicate_keys[pid[i]],
                node_keys[obj[i]],
                lists["edge_doc"][i],
                chunk or "",
                int(position[i]),
            )

        positions: list[int] = []
        for row in rows:
            low = positions[-1] if positions else 0
            positions.append(bisect_left(range(len(subject)), row[:6], low, key=canonical))
        added = _edge_lists(rows)
        for name, values in added.items():
            lists[name] = _with(lists[name], positions, values)
        if rows:
            subject = np.insert(subject, positions, [bisect_left(node_keys, r[0]) for r in rows])
            obj = np.insert(obj, positions, [bisect_left(node_keys, r[2]) for r in rows])
            new_pids = [predicate_ids.setdefault(r[1], len(predicate_ids)) for r in rows]
            predicate_keys = list(predicate_ids)
            pid = np.insert(pid, positions, new_pids)
            position = np.insert(position, positions, [r[5] for r in rows])
        strings = None
        if self.strings is not None:
            renamed = {node_index[key]: name for key, name in change.names.items()}
            new_predicates = predicate_keys[len(self.predicate_keys) :]
            appended = [len(self.predicate_keys)] * len(new_predicates)
            strings = self.strings.spliced(
                {
                    "node_keys": Splice(gone, slots, new_keys),
                    "node_names": Splice(gone, slots, node_names_new, renamed),
                    "predicate_keys": Splice((), appended, new_predicates),
                    **{name: Splice(drop, positions, added[name]) for name in EDGE_LISTS},
                }
            )
        return GraphSnapshot(
            node_keys=node_keys,
            node_names=node_names,
            node_vectors=_spliced(self.node_vectors, nodes, keep_node, slots, new_keys, node_keys),
            edge_subject=subject,
            edge_object=obj,
            edge_predicate_id=pid,
            edge_position=position,
            predicate_keys=predicate_keys,
            edge_group=_groups(subject, pid, obj),
            edge_vectors=_spliced(
                self.edge_vectors, triples, keep, positions, added["edge_text"], lists["edge_text"]
            ),
            **_csr(subject, obj, len(node_keys)),
            chunks=self.chunks.apply(
                change.removed_docs, keep, positions, [(r[3], r[8]) for r in rows]
            ),
            **lists,
            strings=strings,
        )


#: The per-edge lists of strings, in field order.
EDGE_LISTS = (
    "edge_subject_name",
    "edge_predicate",
    "edge_object_name",
    "edge_text",
    "edge_doc",
    "edge_chunk",
    "edge_source",
)
#: The lists of strings, saved as indexes into one table of their strings
#: (``kg.saved_strings``): most repeat (an entity's key and name in each of its edges);
#: the edges' texts are nearly all different, but in the table they are saved with it,
#: a stop appending those a change added (``kg.table_file``).
INDEXED_LISTS = (
    "node_keys",
    "node_names",
    "predicate_keys",
    *EDGE_LISTS,
)


def _edge_rows(edges: Iterable[EdgeRow], texts: Mapping[str, str]) -> list[tuple[Any, ...]]:
    """One row per edge, its canonical sort key first: (subject key, predicate key,
    object key, doc, chunk or "", position), then predicate, the edge, chunk, text (the
    object ``texts`` holds for it, if any). The edge itself is kept, not a dict of its
    attributes: at 323,000 triples those dicts held 69 MiB after a crash's start (the
    pools they freed were not given back) and raised its peak as much."""
    rows = []
    # Few distinct predicates, many edges: normalizing each edge's took a third of
    # the build at 100,000 triples.
    predicate_keys: dict[str, str] = {}
    for edge in edges:
        predicate = edge.predicate
        predicate_key = predicate_keys.get(predicate)
        if predicate_key is None:
            predicate_key = predicate_keys[predicate] = normalize_predicate(predicate)
        text = edge.text
        rows.append(
            (
                edge.subject,
                predicate_key,
                edge.object,
                edge.doc_id,
                edge.chunk_id or "",
                edge.position,
                predicate,
                edge,
                edge.chunk_id,
                texts.get(text, text),
            )
        )
    return rows


def _edge_lists(rows: Sequence[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """The ``EDGE_LISTS`` of ``_edge_rows``' rows, in their order."""
    return {
        "edge_subject_name": [r[7].subject_name for r in rows],
        "edge_predicate": [r[6] for r in rows],
        "edge_object_name": [r[7].object_name for r in rows],
        "edge_text": [r[9] for r in rows],
        "edge_doc": [r[3] for r in rows],
        "edge_chunk": [r[8] for r in rows],
        "edge_source": [r[7].source for r in rows],
    }


def _groups(subject: np.ndarray, predicate: np.ndarray, obj: np.ndarray) -> np.ndarray:
    """Group numbers: consecutive edges with the same (subject, predicate, object) share one."""
    group = np.zeros(len(subject), INDEX)
    if len(subject) > 1:
        new = (subject[1:] != subject[:-1]) | (predicate[1:] != predicate[:-1])
        new |= obj[1:] != obj[:-1]
        np.cumsum(new, out=group[1:])
    return group


def _without(values: list[Any], drop: Sequence[int]) -> list[Any]:
    """A new list: ``values`` without the items at ``drop`` (ascending)."""
    out: list[Any] = []
    start = 0
    for i in drop:
        out += values[start:i]
        start = i + 1
    out += values[start:]
    return out


def _with(values: list[Any], positions: Sequence[int], new: Sequence[Any]) -> list[Any]:
    """A new list: ``new[m]`` inserted before ``values[positions[m]]`` (non-decreasing)."""
    out: list[Any] = []
    start = 0
    for position, value in zip(positions, new, strict=True):
        out += values[start:position]
        out.append(value)
        start = position
    out += values[start:]
    return out


def _spliced(
    vectors: VectorRows,
    table: EmbeddingTable,
    keep: np.ndarray,
    positions: Sequence[int],
    added: Sequence[str],
    keys: Sequence[str],
) -> VectorRows:
    """``vectors`` after the same splice as the keys, taken from ``table``: the kept items'
    rows as they were, unless the table's rows were renumbered (or the vectors came from
    elsewhere, a snapshot read back from disk): then every key's row is looked up."""
    if vectors.token is None or vectors.token is not table.token:
        return VectorRows.of(table, keys)
    rows = vectors.rows[keep]
    if len(added):
        rows = np.insert(rows, positions, table.rows_for(added))
    return VectorRows(table.matrix, rows, table.token)


def _csr(subject: np.ndarray, obj: np.ndarray, node_count: int) -> dict[str, Any]:
    """Adjacency (both directions) as CSR: edges of node n are edges[ptr[n]:ptr[n+1]]."""
    edge_ids = np.arange(len(subject), dtype=INDEX)
    loops = subject == obj  # a self-loop is listed once, not twice
    nodes = np.concatenate([subject, obj[~loops]])
    edges = np.concatenate([edge_ids, edge_ids[~loops]])
    order = np.lexsort((edges, nodes))
    counts = np.bincount(nodes, minlength=node_count)
    ptr = np.zeros(node_count + 1, INDEX)
    np.cumsum(counts, out=ptr[1:])
    return {"adjacency_ptr": ptr, "adjacency_edges": edges[order]}
