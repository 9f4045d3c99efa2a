"""Each node's edges of a ``GraphSnapshot`` (``kg.index``), as CSR.

A change keeps the snapshot's nodes and edges in their canonical order: it drops some and
inserts others among those kept, so one that stays keeps its place relative to every
other that stays (``kg.moves``). Each node's edges, listed in ascending order, therefore
stay in order once renumbered, and a change's adjacency is the old one renumbered with
the added edges merged in (``patched_csr``). Sorted again whole after every change, it
took 1.3 s of a one-document change at 1,000,000 chunks (3.2 million edges); patched,
0.16-0.23 s.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kg.moves import Moves
from kg.numbering import INDEX

MERGED_AT_MOST = 65_536
"""Entries a change merges into the adjacency one by one; more are sorted with the rest.
At 3.2 million edges and 2.1 million nodes (2026-12-07, AVX2 EPYC): the patch 0.16-0.23 s
with up to 16,000 entries merged, about 4 µs an entry beyond the first; sorting all 1.3 s."""


class Csr(NamedTuple):
    """Each node's edges: those of node n are ``edges[ptr[n]:ptr[n+1]]``, ascending."""

    ptr: np.ndarray
    edges: np.ndarray


def csr(subject: np.ndarray, obj: np.ndarray, node_count: int) -> Csr:
    """Adjacency (both directions) as CSR: edges of node n are edges[ptr[n]:ptr[n+1]],
    ascending; a self-loop is listed once."""
    edge_ids = np.arange(len(subject), dtype=INDEX)
    loops = subject == obj
    nodes = np.concatenate([subject, obj[~loops]])
    edges = np.concatenate([edge_ids, edge_ids[~loops]])
    order = np.lexsort((edges, nodes))
    return Csr(_ptr(nodes, node_count), edges[order])


def patched_csr(
    before: Csr,
    dropped: tuple[np.ndarray, np.ndarray],
    nodes_moved: np.ndarray,
    moves: Moves,
    ends: tuple[np.ndarray, np.ndarray],
    node_count: int,
) -> Csr:
    """``csr`` after a change, from the adjacency before it (``before``), the
    dropped edges' (subject, object) before it, each old node's number after it (-1:
    gone, which only a node left without edges may be), the change's edge moves, and
    every edge's (subject, object) after it: the same arrays, without sorting them all.
    A change that adds more than ``MERGED_AT_MOST`` entries is sorted whole."""
    ptr, edges = before
    subject, obj = ends
    if 2 * len(moves.added) > MERGED_AT_MOST:
        return csr(subject, obj, node_count)
    stays = nodes_moved >= 0
    counts = np.zeros(node_count, np.int64)
    counts[nodes_moved[stays]] = (np.diff(ptr) - _incidences(*dropped, len(ptr) - 1))[stays]
    renumbered = moves.moved[edges]
    renumbered = renumbered[renumbered >= 0]
    added = moves.added
    add_subject, add_object = subject[added], obj[added]
    loops = add_subject == add_object
    add_nodes = np.concatenate([add_subject, add_object[~loops]])
    add_edges = np.concatenate([added, added[~loops]])
    starts = np.zeros(node_count + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    at = np.asarray(
        [
            starts[n] + np.searchsorted(renumbered[starts[n] : starts[n + 1]], e)
            for n, e in zip(add_nodes.tolist(), add_edges.tolist(), strict=True)
        ],
        np.int64,
    )
    # Entries inserted at one place: the end of one node's edges before the start of the
    # next node's, and each node's in ascending order.
    order = np.lexsort((add_edges, add_nodes, at))
    new_ptr = np.zeros(node_count + 1, INDEX)
    np.cumsum(counts + np.bincount(add_nodes, minlength=node_count), out=new_ptr[1:])
    merged = np.insert(renumbered, at[order], add_edges[order])
    return Csr(new_ptr, merged)


def _incidences(subject: np.ndarray, obj: np.ndarray, node_count: int) -> np.ndarray:
    """How many entries of the adjacency these edges make, per node."""
    loops = subject == obj
    return np.bincount(subject, minlength=node_count) + np.bincount(
        obj[~loops], minlength=node_count
    )


def _ptr(nodes: np.ndarray, node_count: int) -> np.ndarray:
    ptr = np.zeros(node_count + 1, INDEX)
    np.cumsum(np.bincount(nodes, minlength=node_count), out=ptr[1:])
    return ptr
