"""Shared test data and helpers for the knowledge-graph tests (imported by conftest and tests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kg import EmbedFn, Triple, TripleExtractor
from kg.embeddings import normalize_rows
from kg.index import EDGE_LISTS, GraphSnapshot
from kg.row_matrix import dot_rows
from kg.vector_rows import VectorRows


class CountingEmbed:
    """Delegates to the real embedder and records every call, to prove what was (re)embedded."""

    def __init__(self, inner: EmbedFn) -> None:
        self._inner = inner
        self.calls: list[list[str]] = []

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self._inner(texts)

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]


def supplied(doc_id: str, *triples: tuple[str, str, str]) -> list[Triple]:
    """Supplied (document-level) triples for ``doc_id``."""
    return [Triple(subject=s, predicate=p, object=o, doc_id=doc_id) for s, p, o in triples]


CORPUS: dict[str, list[tuple[str, str]]] = {
    "curie": [
        (
            "curie#0",
            "Marie Curie was born in Warsaw. Marie Curie discovered polonium and radium.",
        ),
        (
            "curie#1",
            "Marie Curie won the Nobel Prize in 1903. The University of Paris hired Marie Curie.",
        ),
    ],
    "einstein": [
        (
            "einstein#0",
            "Albert Einstein was born in Ulm. Albert Einstein developed the theory of "
            "relativity. Albert Einstein won the Nobel Prize in 1921.",
        ),
    ],
    "paris": [
        (
            "paris#0",
            "Paris is the capital of France. The Eiffel Tower was designed by Gustave Eiffel. "
            "The Eiffel Tower stands in Paris.",
        ),
    ],
}
"""A small real corpus: chunk texts per document, as the ingest pipeline would pass them."""


def corpus_triples(extractor: TripleExtractor, doc_id: str) -> list[Triple]:
    """Extracted triples of one corpus document, plus one supplied triple for "curie"."""
    triples = extractor.extract_chunks(doc_id, CORPUS[doc_id])
    if doc_id == "curie":
        triples += supplied("curie", ("Warsaw", "capital of", "Poland"))
    return triples


def snapshot_content(snap: GraphSnapshot) -> dict[str, Any]:
    """What a snapshot says about the graph, comparable with ``==``: two snapshots of one
    graph agree on this however they were made (built, patched, read back), even where
    they number predicates or chunks, or lay out their vectors, differently."""
    arrays = (
        "edge_subject",
        "edge_object",
        "edge_position",
        "edge_group",
        "adjacency_ptr",
        "adjacency_edges",
    )
    lists = ("node_keys", "node_names", *EDGE_LISTS)
    return {
        **{name: list(getattr(snap, name)) for name in lists},
        **{name: getattr(snap, name).tolist() for name in arrays},
        "node_position": {key: snap.node_position(key) for key in snap.node_keys},
        "edge_predicate_key": [snap.predicate_keys[p] for p in snap.edge_predicate_id],
        "node_vectors": np.asarray(snap.node_vectors).tolist(),
        "edge_vectors": np.asarray(snap.edge_vectors).tolist(),
        "chunks": {key: _listed(snap.chunks.edges(*key)) for key in snap.chunks.chunk_keys()},
        "documents": {doc: snap.chunks.document(doc).tolist() for doc in snap.document_ids()},
    }


def _listed(edges: np.ndarray | None) -> list[int] | None:
    return None if edges is None else edges.tolist()


def full_scan_choice(
    rows: np.ndarray, query: np.ndarray, threshold: float, count: int
) -> list[int]:
    """The entities ``SubgraphSelector`` links from a float32 scan of every row: those at
    or above ``threshold``, the best ``count`` by score rounded to six places, then index."""
    sims = np.array([dot_rows(rows[[i]], query)[0] for i in range(len(rows))])
    above = np.flatnonzero(sims >= threshold)
    rounded = np.round(sims[above], 6)
    return [int(i) for i in above[np.lexsort((above, -rounded))][:count]]


def candidates_choice(
    vectors: VectorRows, query: np.ndarray, threshold: float, count: int
) -> list[int]:
    """The same choice made from ``VectorRows.candidates`` (its items ascending, each once,
    each an item of ``vectors``)."""
    items, sims = vectors.candidates(query, threshold, count)
    assert np.all(np.diff(items) > 0) and np.all((items >= 0) & (items < len(vectors)))
    kept = sims >= threshold
    above = items[kept]
    rounded = np.round(sims[kept], 6)
    return [int(i) for i in above[np.lexsort((above, -rounded))][:count]]


ROW_DIM = 384
"""The width of the model's vectors, as the rows' tests make them."""


def shaped_rows(rng: np.random.Generator, count: int) -> np.ndarray:
    """Unit rows whose energy falls off over the axes, around a shared direction, as a
    sentence model's do (81 % of it on the first 128 axes, as for real entities); with
    the shapes that stress a scale: a dominant value, one-hot rows, exact and near
    duplicates (ties), and a zero row."""
    spread = (np.arange(ROW_DIM) + 8.0).astype(np.float32) ** -0.6
    mix = np.linalg.qr(rng.standard_normal((ROW_DIM, ROW_DIM)))[0].astype(np.float32)
    rows = (rng.standard_normal((count, ROW_DIM)).astype(np.float32) * spread) @ mix
    rows += 0.4 * mix[5]
    rows[:8, 0] *= 40
    rows[8:16] = 0
    rows[8:16, 3] = 1
    rows[20:30] = rows[30:40]
    rows[40:50] = rows[50:60] + 1e-6
    rows = normalize_rows(rows)
    rows[-1] = 0
    return rows


def random_rows(rng: np.random.Generator, count: int) -> np.ndarray:
    """Unit rows without principal axes: a floor drops few of them."""
    return normalize_rows(rng.standard_normal((count, ROW_DIM)).astype(np.float32))


def near_queries(rng: np.random.Generator, rows: np.ndarray, count: int) -> list[np.ndarray]:
    """Questions near some rows (so several clear the threshold), some right on one."""
    picks = rows[rng.integers(len(rows), size=count)]
    noise = rng.standard_normal(picks.shape).astype(np.float32) / np.sqrt(ROW_DIM)
    scale = np.linspace(0.0, 1.5, count, dtype=np.float32)[:, None]
    return list(normalize_rows(picks + scale * noise))
