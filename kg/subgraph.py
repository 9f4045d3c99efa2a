"""Choose the few triples worth putting in a question's prompt.

1. Link the question to nodes (``kg.links``), three ways: (a) word n-grams of the question
   whose normalized form is a node key (tokenizer + lemma tables only, ~0.1 ms; a full parse
   would cost ~6 ms); (b) nodes on edges that came from the retrieved passages' chunks (a
   triple supplied for a whole document counts for any passage of that document); (c) the few
   nodes whose name embedding is closest to the question embedding, above a threshold (found
   through the vectors' int8 codes, then scored exactly: ``VectorRows.candidates``). (a) and
   (c) need only the question (``link_question``): the retriever makes them while the index
   searches for its passages.
2. Gather candidate edges: the passages' edges, then edges touching linked nodes (hop 1), then
   edges touching their neighbours (hop 2), in that order, stopping at a fixed cap so that a
   hub cannot make one query slow. Edge order inside a node is the snapshot's canonical order,
   so the cut is deterministic.
3. Score each candidate: cosine(question, triple-text embedding), plus a boost when the edge
   comes from a retrieved passage. One fact stated by several documents counts once (its best
   edge). Choose ``max_triples`` of them (ties: triple text): by default one at a time, so
   that a triple continuing a path toward the relation the question asks for is preferred and
   one restating a chosen triple gives way (``kg.paths``); with ``path_weights=None``, the
   best-scoring ones. Return them sorted by (subject, predicate, object): a canonical order
   keeps the prompt prefix stable.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kg.embeddings import normalize_rows
from kg.index import GraphSnapshot
from kg.intent import RelationIntent
from kg.links import (
    LinkedNodes,
    PassageLike,
    QuestionLinks,
    most_similar,
    with_passages,
)
from kg.models import SCORE_DECIMALS, ScoredTriple, TripleSource
from kg.normalize import EntityNormalizer
from kg.paths import DEFAULT_WEIGHTS, PathWeights, rank_paths
from kg.row_matrix import dot_rows
from kg.store import KnowledgeGraph


class SubgraphSelector:
    """Selects a small, ranked, deterministic subgraph for a question (module docstring)."""

    def __init__(
        self,
        graph: KnowledgeGraph,
        normalizer: EntityNormalizer | None = None,
        *,
        similarity_threshold: float = 0.5,
        max_similar_nodes: int = 5,
        max_candidate_edges: int = 2000,
        passage_boost: float = 0.1,
        min_score: float = 0.3,
        max_ngram_words: int = 6,
        path_weights: PathWeights | None = DEFAULT_WEIGHTS,
    ) -> None:
        self._graph = graph
        self._normalizer = normalizer
        self.similarity_threshold = similarity_threshold
        self.max_similar_nodes = max_similar_nodes
        self.max_candidate_edges = max_candidate_edges
        self.passage_boost = passage_boost
        self.min_score = min_score
        self.max_ngram_words = max_ngram_words
        self.path_weights = path_weights

    @property
    def max_gain(self) -> float:
        """The most a triple's score can exceed its relevance (0 for the plain ranking)."""
        return self.path_weights.max_gain if self.path_weights else 0.0

    @property
    def graph(self) -> KnowledgeGraph:
        """The graph this selector reads (through its current snapshot)."""
        return self._graph

    @property
    def normalizer(self) -> EntityNormalizer:
        """The normalizer shared with the graph, so question words and node keys agree."""
        if self._normalizer is None:
            self._normalizer = self._graph.normalizer
        return self._normalizer

    def select(
        self,
        question: str,
        question_embedding: np.ndarray,
        passages: Sequence[PassageLike] = (),
        max_triples: int = 3,
    ) -> list[ScoredTriple]:
        """At most ``max_triples`` triples for the question, sorted by (s, p, o), with scores.

        ``question_embedding`` is the retriever's (dim,) query vector; ``passages`` are the
        retrieved passages' (doc_id, chunk_id). Same graph and inputs give the same output.
        """
        return self.select_with_reach(question, question_embedding, passages, max_triples)[0]

    def select_with_reach(
        self,
        question: str,
        question_embedding: np.ndarray,
        passages: Sequence[PassageLike] = (),
        max_triples: int = 3,
        snap: GraphSnapshot | None = None,
        links: QuestionLinks | None = None,
    ) -> tuple[list[ScoredTriple], frozenset[str]]:
        """``select``'s triples, and the keys of the entities they join. A new triple can
        change the choice only by being chosen: by its score (at most its cosine plus
        ``max_gain``), or, path-aware, by continuing from one of these entities. ``snap``:
        the graph's current snapshot unless given; ``links``: the question's own links
        (``link_question``: made while its passages were searched), read from their
        snapshot."""
        if max_triples <= 0:
            return [], frozenset()
        if links is None:
            links = self.link_question(question, question_embedding, snap)
        snap = links.snap
        if snap.edge_count == 0:
            return [], frozenset()
        query = links.query
        linked = with_passages(links, passages)
        candidates = self.candidate_edges(snap, linked)
        if candidates.size == 0:
            return [], frozenset()
        if self.path_weights is None:
            ranked = self._rank(snap, query, candidates, linked.passage_edges, max_triples)
        else:
            # Read once: at 1M chunks these are ~2,000 rows of a 5 GB file, a question.
            vectors = snap.edge_vectors[candidates]
            relevance = self._relevance(vectors, query, candidates, linked.passage_edges)
            named = [w for n in linked.lexical for w in snap.node_keys[n].split()]
            ranked = rank_paths(
                snap,
                candidates,
                vectors,
                relevance,
                RelationIntent(self.normalizer, question, named),
                linked.seeds(),
                list(dict.fromkeys([*linked.lexical, *linked.similar])),
                max_triples,
                self.min_score,
                self.path_weights,
            )
        triples = _canonical([_scored(snap, edge, score) for score, edge in ranked])
        ends = (n for _, edge in ranked for n in (snap.edge_subject[edge], snap.edge_object[edge]))
        return triples, frozenset(snap.node_keys[int(n)] for n in ends)

    def link_question(
        self, question: str, question_embedding: np.ndarray, snap: GraphSnapshot | None = None
    ) -> QuestionLinks:
        """Steps 1(a) and 1(c): the question's links by its words and its embedding, which
        need no passages (an empty graph links none, and scans nothing)."""
        snap = snap if snap is not None else self._graph.snapshot
        query = normalize_rows(question_embedding)[0]
        if snap.edge_count == 0:
            return QuestionLinks(snap, query, [], [])
        lexical: list[int] = []
        for key in self.normalizer.candidate_keys(question, self.max_ngram_words):
            node = snap.node_position(key)
            if node is not None:
                lexical.append(node)
        return QuestionLinks(
            snap, query, list(dict.fromkeys(lexical)), self._similar_nodes(snap, query)
        )

    def link(
        self,
        question: str,
        query: np.ndarray,
        passages: Sequence[PassageLike],
        snap: GraphSnapshot | None = None,
    ) -> LinkedNodes:
        """Link the question to graph nodes by words, passages and embedding similarity."""
        return with_passages(self.link_question(question, query, snap), passages)

    def _similar_nodes(self, snap: GraphSnapshot, query: np.ndarray) -> list[int]:
        return most_similar(
            snap.node_vectors, query, self.similarity_threshold, self.max_similar_nodes
        )

    def candidate_edges(self, snap: GraphSnapshot, linked: LinkedNodes) -> np.ndarray:
        """Passage edges, then hop-1, then hop-2 edges, each once, up to the cap."""
        cap = self.max_candidate_edges
        chosen = [linked.passage_edges[:cap]]
        taken = np.zeros(snap.edge_count, dtype=bool)
        taken[chosen[0]] = True
        count = int(chosen[0].size)
        visited = np.zeros(len(snap.node_keys), dtype=bool)
        frontier = np.array(linked.seeds(), dtype=np.int64)
        visited[frontier] = True
        for _ in range(2):
            hop: list[np.ndarray] = []
            start = 0
            # Take frontier nodes in batches just big enough to fill the cap, so a hub or a
            # wide hop 2 never costs more than the edges actually kept.
            while start < frontier.size and count < cap:
                lengths = (
                    snap.adjacency_ptr[frontier[start:] + 1] - snap.adjacency_ptr[frontier[start:]]
                )
                stop = start + int(np.searchsorted(np.cumsum(lengths), cap - count)) + 1
                edges = np.concatenate([snap.incident(int(n)) for n in frontier[start:stop]])
                start = stop
                edges = _unique_in_order(edges[~taken[edges]])[: cap - count]
                taken[edges] = True
                count += int(edges.size)
                hop.append(edges)
            if not hop:
                break
            chosen.extend(hop)
            hop_edges = np.concatenate(hop)
            ends = np.stack([snap.edge_subject[hop_edges], snap.edge_object[hop_edges]], 1).ravel()
            ends = _unique_in_order(ends[~visited[ends]])
            visited[ends] = True
            frontier = ends
        return np.concatenate(chosen)

    def _relevance(
        self,
        vectors: np.ndarray,
        query: np.ndarray,
        candidates: np.ndarray,
        passage_edges: np.ndarray,
    ) -> np.ndarray:
        """Cosine to the question (``vectors``: the candidates'), plus the boost for edges
        of the retrieved passages."""
        scores = dot_rows(vectors, query).astype(np.float64)
        if passage_edges.size and self.passage_boost:
            scores += self.passage_boost * np.isin(candidates, passage_edges)
        return scores

    def _rank(
        self,
        snap: GraphSnapshot,
        query: np.ndarray,
        candidates: np.ndarray,
        passage_edges: np.ndarray,
        max_triples: int,
    ) -> list[tuple[float, int]]:
        """The best ``max_triples`` (score, edge) by score alone, one edge per fact."""
        relevance = self._relevance(snap.edge_vectors[candidates], query, candidates, passage_edges)
        scores = np.round(relevance, SCORE_DECIMALS)
        keep = np.flatnonzero(scores >= self.min_score)
        candidates, scores = candidates[keep], scores[keep]
        # Sorting all candidates in Python would cost ~1 ms; a short list of the best (plus
        # anything tied with the last of them) is enough unless duplicates crowd it out.
        shortlist = _top_with_ties(scores, 8 * max_triples)
        best = self._best_per_fact(snap, candidates, scores, shortlist, max_triples)
        if len(best) < max_triples and shortlist.size < scores.size:
            everything = np.arange(scores.size)
            best = self._best_per_fact(snap, candidates, scores, everything, max_triples)
        return best

    def _best_per_fact(
        self,
        snap: GraphSnapshot,
        candidates: np.ndarray,
        scores: np.ndarray,
        positions: np.ndarray,
        max_triples: int,
    ) -> list[tuple[float, int]]:
        """Walk positions best-first (ties: triple text); keep one edge per fact."""
        order = sorted(
            positions.tolist(),
            key=lambda i: (-scores[i], snap.edge_text[int(candidates[i])], int(candidates[i])),
        )
        best: list[tuple[float, int]] = []
        groups: set[int] = set()
        for i in order:
            score = float(scores[i])
            edge = int(candidates[i])
            group = int(snap.edge_group[edge])
            if group not in groups:
                groups.add(group)
                best.append((score, edge))
                if len(best) == max_triples:
                    break
        return best


def _unique_in_order(values: np.ndarray) -> np.ndarray:
    """``values`` without repeats, first occurrences in their original order."""
    if values.size == 0:
        return values
    _, first = np.unique(values, return_index=True)
    return values[np.sort(first)]


def _top_with_ties(scores: np.ndarray, count: int) -> np.ndarray:
    """Positions of the ``count`` best scores plus every position tied with the worst of them."""
    if scores.size <= count:
        return np.arange(scores.size)
    cutoff = np.partition(scores, scores.size - count)[scores.size - count]
    return np.flatnonzero(scores >= cutoff)


def _canonical(triples: list[ScoredTriple]) -> list[ScoredTriple]:
    """Sorted by (subject, predicate, object): the prompt prefix does not depend on scores."""
    return sorted(triples, key=lambda t: (t.subject, t.predicate, t.object, -t.score))


def _scored(snap: GraphSnapshot, edge: int, score: float) -> ScoredTriple:
    source: TripleSource = "extracted" if snap.edge_source[edge] == "extracted" else "supplied"
    return ScoredTriple(
        subject=snap.edge_subject_name[edge],
        predicate=snap.edge_predicate[edge],
        object=snap.edge_object_name[edge],
        score=score,
        doc_id=snap.edge_doc[edge],
        chunk_id=snap.edge_chunk[edge],
        source=source,
    )
