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
patch does Python work per changed edge and array copies for the rest: the adjacency and
the chunks' edges renumbered (``kg.adjacency``, ``kg.edge_lists``), the lists of strings
read through indexes it splices (``kg.snapshot_lists``). Both give the same snapshot
(``tests/kg/test_snapshot_apply.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kg.adjacency import Csr, csr, patched_csr
from kg.edge_lists import ChunkIndex
from kg.embeddings import EmbeddingTable
from kg.models import EdgeRow
from kg.moves import Moves
from kg.numbering import INDEX
from kg.saved_strings import Splice, StringIndexes
from kg.snapshot_lists import (
    EDGE_LISTS,
    INDEXED_LISTS,
    canonical_rows,
    edge_lists,
    inserted,
    sorted_place,
    without,
)
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

    node_keys: Sequence[str] = field(default_factory=list)
    node_names: Sequence[str] = field(default_factory=list)
    node_vectors: VectorRows = field(default_factory=_no_vectors)
    edge_subject: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    edge_object: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    # Normalized predicates, numbered: edges are ordered, and grouped, by them.
    edge_predicate_id: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    # Each edge's position among its document's edges (its key is "<doc>#<position>").
    edge_position: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    predicate_keys: Sequence[str] = field(default_factory=list)
    edge_subject_name: Sequence[str] = field(default_factory=list)
    edge_predicate: Sequence[str] = field(default_factory=list)
    edge_object_name: Sequence[str] = field(default_factory=list)
    edge_text: Sequence[str] = field(default_factory=list)
    edge_doc: Sequence[str] = field(default_factory=list)
    edge_chunk: Sequence[str | None] = field(default_factory=list)
    edge_source: Sequence[str] = field(default_factory=list)
    # Edges with the same normalized (subject, predicate, object) share a group: one fact
    # stated by several documents is offered once.
    edge_group: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    edge_vectors: VectorRows = field(default_factory=_no_vectors)
    adjacency_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, INDEX))
    adjacency_edges: np.ndarray = field(default_factory=lambda: _EMPTY_INT)
    chunks: ChunkIndex = field(default_factory=ChunkIndex)
    # The ``INDEXED_LISTS`` as the snapshot file saves them, kept in step by ``apply``,
    # which the lists above are then read through (None: not kept, as after a build from
    # the rows; the lists are plain lists, and a save looks each string up).
    strings: StringIndexes | None = None

    @classmethod
    def empty(cls) -> GraphSnapshot:
        """A snapshot of no graph, whose changes keep its strings' indexes."""
        strings = StringIndexes.of({name: [] for name in INDEXED_LISTS})
        lists: dict[str, Any] = strings.columns()
        return cls(strings=strings, **lists)

    @property
    def edge_count(self) -> int:
        """Number of edges (triples) in the snapshot."""
        return len(self.edge_text)

    def node_position(self, key: str) -> int | None:
        """The number of node ``key`` (its place in ``node_keys``, which is sorted), or
        None. A search, not a dict: at 628,367 entities a dict of them held 31 MiB, and
        each change built another beside it (a question looks up a few dozen keys)."""
        at = sorted_place(self.node_keys, key)
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
        rows = canonical_rows(edges, texts)
        del texts
        rows.sort(key=lambda r: r[:6])
        predicate_ids: dict[str, int] = {}
        pid = np.fromiter(
            (predicate_ids.setdefault(r[1], len(predicate_ids)) for r in rows), INDEX, len(rows)
        )
        subject = np.fromiter((node_index[r[0]] for r in rows), INDEX, len(rows))
        obj = np.fromiter((node_index[r[2]] for r in rows), INDEX, len(rows))
        del node_index
        lists: dict[str, Any] = edge_lists(rows)
        adjacency = csr(subject, obj, len(node_keys))
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
            adjacency_ptr=adjacency.ptr,
            adjacency_edges=adjacency.edges,
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
        new_keys = sorted(k for k in change.names if found[k] is None)
        # A new key's place among the kept keys: among all, less the gone before it.
        places = [sorted_place(self.node_keys, k) for k in new_keys]
        slots = (np.asarray(places, np.int64) - np.searchsorted(gone, places)).tolist()
        keep_node = np.ones(len(self.node_keys), bool)
        keep_node[gone] = False
        node_moves = Moves.of(keep_node, slots)
        renumber = node_moves.moved
        # The nodes the change names, numbered in the new order.
        node_index = dict(zip(new_keys, node_moves.added.tolist(), strict=True))
        node_index |= {k: int(renumber[n]) for k in change.names if (n := found[k]) is not None}
        node_count = len(self.node_keys) - len(gone) + len(new_keys)

        # Edges: drop the removed documents', insert the added at their canonical place.
        gone_edges = np.unique(self.document_edges(list(change.removed_docs)))
        keep = np.ones(self.edge_count, bool)
        keep[gone_edges] = False
        subject = renumber[self.edge_subject[keep]]
        obj = renumber[self.edge_object[keep]]
        if (subject < 0).any() or (obj < 0).any():
            raise ValueError("the change removed a node that kept edges")
        kept_edges = np.flatnonzero(keep)
        pid = self.edge_predicate_id[keep]
        position = self.edge_position[keep]
        rows = canonical_rows(change.edges, {})
        rows.sort(key=lambda r: r[:6])

        def canonical(i: int) -> tuple[Any, ...]:
            edge = int(kept_edges[i])
            return (
                self.node_keys[self.edge_subject[edge]],
                self.predicate_keys[self.edge_predicate_id[edge]],
                self.node_keys[self.edge_object[edge]],
                self.edge_doc[edge],
                self.edge_chunk[edge] or "",
                int(self.edge_position[edge]),
            )

        positions: list[int] = []
        for row in rows:
            low = positions[-1] if positions else 0
            positions.append(bisect_left(range(len(subject)), row[:6], low, key=canonical))
        moves = Moves.of(keep, positions)
        predicate_ids = {key: i for i, key in enumerate(self.predicate_keys)}
        if rows:
            subject = np.insert(subject, positions, [node_index[r[0]] for r in rows])
            obj = np.insert(obj, positions, [node_index[r[2]] for r in rows])
            new_pids = [predicate_ids.setdefault(r[1], len(predicate_ids)) for r in rows]
            pid = np.insert(pid, positions, new_pids)
            position = np.insert(position, positions, [r[5] for r in rows])
        added = edge_lists(rows)
        new_names = [change.names[k] for k in new_keys]
        new_predicates = list(predicate_ids)[len(self.predicate_keys) :]
        renamed = {node_index[key]: name for key, name in change.names.items()}
        drop = gone_edges.tolist()
        strings = None
        if self.strings is not None:  # the lists read through the spliced indexes
            strings = self.strings.spliced(
                {
                    "node_keys": Splice(gone, slots, new_keys),
                    "node_names": Splice(gone, slots, new_names, renamed),
                    "predicate_keys": Splice(
                        (), [len(self.predicate_keys)] * len(new_predicates), new_predicates
                    ),
                    **{name: Splice(drop, positions, added[name]) for name in EDGE_LISTS},
                }
            )
            lists: dict[str, Any] = strings.columns()
        else:  # plain lists, copied
            lists = {
                "node_keys": inserted(without(self.node_keys, gone), slots, new_keys),
                "node_names": inserted(without(self.node_names, gone), slots, new_names),
                "predicate_keys": [*self.predicate_keys, *new_predicates],
                **{
                    name: inserted(without(getattr(self, name), drop), positions, added[name])
                    for name in EDGE_LISTS
                },
            }
            for at, name in renamed.items():
                lists["node_names"][at] = name
        adjacency = patched_csr(
            Csr(self.adjacency_ptr, self.adjacency_edges),
            (self.edge_subject[gone_edges], self.edge_object[gone_edges]),
            renumber,
            moves,
            (subject, obj),
            node_count,
        )
        return GraphSnapshot(
            node_vectors=_spliced(
                self.node_vectors, nodes, keep_node, slots, new_keys, lists["node_keys"]
            ),
            edge_subject=subject,
            edge_object=obj,
            edge_predicate_id=pid,
            edge_position=position,
            edge_group=_groups(subject, pid, obj),
            edge_vectors=_spliced(
                self.edge_vectors, triples, keep, positions, added["edge_text"], lists["edge_text"]
            ),
            adjacency_ptr=adjacency.ptr,
            adjacency_edges=adjacency.edges,
            chunks=self.chunks.apply(change.removed_docs, moves, [(r[3], r[8]) for r in rows]),
            **lists,
            strings=strings,
        )


def _groups(subject: np.ndarray, predicate: np.ndarray, obj: np.ndarray) -> np.ndarray:
    """Group numbers: consecutive edges with the same (subject, predicate, object) share one."""
    group = np.zeros(len(subject), INDEX)
    if len(subject) > 1:
        new = (subject[1:] != subject[:-1]) | (predicate[1:] != predicate[:-1])
        new |= obj[1:] != obj[:-1]
        np.cumsum(new, out=group[1:])
    return group


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
