"""A change's adjacency and chunk lists, patched from the ones before it
(``kg.adjacency.patched_csr``, ``ChunkIndex.apply``), equal the ones sorted whole."""

from __future__ import annotations

import numpy as np
import pytest

from kg import adjacency
from kg.adjacency import csr, patched_csr
from kg.edge_lists import ChunkIndex
from kg.moves import Moves
from kg.numbering import INDEX


def _ends(rng: np.random.Generator, nodes: int, edges: int) -> tuple[np.ndarray, np.ndarray]:
    """Random edges between ``nodes`` nodes, a tenth of them self-loops."""
    subject = rng.integers(nodes, size=edges).astype(INDEX)
    obj = rng.integers(nodes, size=edges).astype(INDEX)
    loops = rng.random(edges) < 0.1
    obj[loops] = subject[loops]
    return subject, obj


def _change(rng: np.random.Generator, nodes: int, edges: int, added: int) -> tuple[Moves, int]:
    """Random edge moves: about a fifth of the edges dropped, ``added`` inserted at random
    places among those kept."""
    keep = rng.random(edges) >= 0.2
    positions = np.sort(rng.integers(int(keep.sum()) + 1, size=added)).tolist()
    return Moves.of(keep, positions), added


@pytest.mark.parametrize("merged_at_most", [adjacency.MERGED_AT_MOST, 0], ids=["merged", "whole"])
@pytest.mark.parametrize(("nodes", "edges", "added"), [(50, 400, 7), (3, 40, 30), (2000, 9000, 0)])
def test_a_patched_adjacency_is_the_one_sorted_whole(
    monkeypatch: pytest.MonkeyPatch, merged_at_most: int, nodes: int, edges: int, added: int
) -> None:
    """Edges dropped and inserted, nodes left without edges gone and new ones numbered
    among the rest: each node's edges as ``csr`` lists them for the changed graph."""
    monkeypatch.setattr(adjacency, "MERGED_AT_MOST", merged_at_most)
    rng = np.random.default_rng(nodes + edges)
    for _ in range(20):
        subject, obj = _ends(rng, nodes, edges)
        before = csr(subject, obj, nodes)
        moves, _ = _change(rng, nodes, edges, added)
        # Nodes with no kept edge may go; new nodes are numbered among the kept ones.
        used = np.zeros(nodes, bool)
        used[subject[moves.keep]] = used[obj[moves.keep]] = True
        keep_node = used | (rng.random(nodes) < 0.5)
        new_count = int(keep_node.sum()) + int(rng.integers(4))
        fresh = np.sort(rng.choice(new_count, new_count - int(keep_node.sum()), replace=False))
        nodes_moved = np.full(nodes, -1, INDEX)
        nodes_moved[keep_node] = np.setdiff1d(np.arange(new_count), fresh)
        add_subject, add_object = _ends(rng, new_count, added)
        after = (
            np.insert(nodes_moved[subject[moves.keep]], moves.positions, add_subject),
            np.insert(nodes_moved[obj[moves.keep]], moves.positions, add_object),
        )
        gone = ~moves.keep
        patched = patched_csr(
            before,
            (subject[gone], obj[gone]),
            nodes_moved,
            moves,
            after,
            new_count,
        )
        whole = csr(*after, new_count)
        for name in ("ptr", "edges"):
            np.testing.assert_array_equal(getattr(patched, name), getattr(whole, name), name)
            assert getattr(patched, name).dtype == INDEX, name


def test_edge_moves_number_the_edges_as_np_insert_places_them() -> None:
    keep = np.array([True, False, True, True, False, True])
    moves = Moves.of(keep, [0, 2, 2, 4])
    kept = np.flatnonzero(keep) + 100
    placed = np.insert(kept, moves.positions, [-1, -2, -3, -4])
    assert moves.moved.tolist() == [1, -1, 2, 5, -1, 6]
    assert moves.added.tolist() == [0, 3, 4, 7]
    assert placed[moves.added].tolist() == [-1, -2, -3, -4]
    assert placed[moves.moved[keep]].tolist() == kept.tolist()


def _chunk_lists(index: ChunkIndex) -> dict[tuple[str, str | None], list[int]]:
    found = {key: index.edges(*key) for key in index.chunk_keys()}
    return {key: edges.tolist() for key, edges in found.items() if edges is not None}


@pytest.mark.parametrize("restated", [False, True], ids=["new-chunks", "a-kept-chunk-grows"])
def test_a_patched_chunk_index_is_the_one_built_whole(restated: bool) -> None:
    """Documents replaced (their chunks new) and removed; ``a-kept-chunk-grows`` also
    files an added edge under a chunk of a document the change kept, which the patch
    leaves to a whole sort."""
    rng = np.random.default_rng(5)
    docs = [f"d{i}" for i in range(12)]
    chunks: list[str | None] = [None, "#0", "#1", "#2"]
    for _ in range(30):
        count = int(rng.integers(1, 300))
        edge_doc = [docs[i] for i in rng.integers(len(docs), size=count)]
        edge_chunk = [chunks[i] for i in rng.integers(len(chunks), size=count)]
        index = ChunkIndex.of(edge_doc, edge_chunk)
        removed = set(rng.choice(docs, 3, replace=False).tolist())
        keep = np.array([d not in removed for d in edge_doc])
        targets = sorted(removed) + ([edge_doc[int(np.argmax(keep))]] if restated else [])
        added = [
            (targets[i], chunks[j])
            for i, j in zip(
                rng.integers(len(targets), size=9), rng.integers(len(chunks), size=9), strict=True
            )
        ]
        moves = Moves.of(keep, np.sort(rng.integers(int(keep.sum()) + 1, size=9)).tolist())
        after_doc = np.insert(
            np.array(edge_doc, object)[keep], moves.positions, [a[0] for a in added]
        )
        after_chunk = np.insert(
            np.array(edge_chunk, object)[keep], moves.positions, [a[1] for a in added]
        )
        patched = index.apply(removed, moves, added)
        whole = ChunkIndex.of(list(after_doc), list(after_chunk))
        assert _chunk_lists(patched) == _chunk_lists(whole)
        assert sorted(patched.documents) == sorted(whole.documents)
        assert patched.live == whole.live == len(_chunk_lists(whole))
        for doc in whole.documents:
            assert patched.document(doc).tolist() == whole.document(doc).tolist()
