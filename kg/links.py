"""Step 1 of a question's selection (``kg.subgraph``): the nodes a question links to, by
its words, its embedding, and its retrieved passages' edges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kg.index import GraphSnapshot
from kg.models import SCORE_DECIMALS
from kg.vector_rows import VectorRows


class PassageRef(Protocol):
    """Anything with the provenance of a retrieved passage
    (e.g. ``rag.knowledge.models.Passage``)."""

    @property
    def doc_id(self) -> str: ...

    @property
    def chunk_id(self) -> str: ...


PassageLike = PassageRef | tuple[str, str]


@dataclass(frozen=True)
class LinkedNodes:
    """Which nodes a question linked to, by route (node indices into the snapshot)."""

    lexical: list[int]
    similar: list[int]
    passage: list[int]
    passage_edges: np.ndarray

    def seeds(self) -> list[int]:
        """All linked nodes, most specific route first, each once."""
        return list(dict.fromkeys([*self.lexical, *self.similar, *self.passage]))


@dataclass(frozen=True)
class QuestionLinks:
    """A question's links to the graph that need no passages (steps 1(a) and 1(c)), read
    from one snapshot: the retriever makes them while the question's passages are
    searched, and the rest of the selection reads the same snapshot."""

    snap: GraphSnapshot
    query: np.ndarray
    lexical: list[int]
    similar: list[int]


def most_similar(vectors: VectorRows, query: np.ndarray, threshold: float, count: int) -> list[int]:
    """The items of ``vectors`` a question links by embedding: those scoring at least
    ``threshold`` with ``query``, the best ``count``, best first (equal scores, to six
    places, by item: node order is key order)."""
    if count <= 0 or vectors.shape[0] == 0:
        return []
    # The few that can be among the best, scored exactly (from int8 codes: a scan of
    # every float32 vector was 161 ms and 3.2 GB of pages a question at 1M chunks).
    items, sims = vectors.candidates(query, threshold, count)
    kept = sims >= threshold
    above = items[kept]
    if above.size == 0:
        return []
    rounded = np.round(sims[kept], SCORE_DECIMALS)
    order = np.lexsort((above, -rounded))[:count]
    return [int(i) for i in above[order]]


def with_passages(links: QuestionLinks, passages: Sequence[PassageLike]) -> LinkedNodes:
    """Step 1(b) added to the question's own links."""
    snap = links.snap
    edges = passage_edges(snap, passages)
    passage_nodes = np.stack([snap.edge_subject[edges], snap.edge_object[edges]], axis=1).ravel()
    return LinkedNodes(
        lexical=links.lexical,
        similar=links.similar,
        passage=list(dict.fromkeys(passage_nodes.tolist())),
        passage_edges=edges,
    )


def passage_edges(snap: GraphSnapshot, passages: Sequence[PassageLike]) -> np.ndarray:
    """Edges from the passages' chunks, plus document-level edges of the passages' docs."""
    parts: list[np.ndarray] = []
    docs: list[str] = []
    for passage in passages:
        doc_id, chunk_id = (
            passage if isinstance(passage, tuple) else (passage.doc_id, passage.chunk_id)
        )
        edges = snap.chunks.edges(doc_id, chunk_id)
        if edges is not None:
            parts.append(edges)
        docs.append(doc_id)
    for doc_id in dict.fromkeys(docs):
        edges = snap.chunks.edges(doc_id, None)
        if edges is not None:
            parts.append(edges)
    if not parts:
        return np.zeros(0, dtype=np.int64)
    merged = np.concatenate(parts)
    _, first = np.unique(merged, return_index=True)
    return merged[np.sort(first)]
