"""The one rule for "can this knowledge-base change have moved this context?".

A context is what a question retrieved: its passages (chunk and document ids), the
score of its k-th passage, and the facts it injects. A batch of committed changes can
have moved it when:

1. a chunk it uses was replaced or deleted, or a document its passages or facts came
   from was added, updated or deleted (added too: a context retrieved between a write's
   commit and its notification may already hold the new document's chunks with the
   graph from before it);
2. a new chunk scores above its k-th passage for its question (only then can the chunk
   enter its top-k), or above the weakest candidate where an identifier rerank chose the
   top-k (``Retrieval.entry_bar``, ``rag.chat.memo.kth_score``);
3. a new fact of a changed document scores above the weakest fact it injects (or the
   selector's threshold while it has free slots), less the most the selector adds to a
   fact's score over its cosine;
4. with path-aware fact selection (``kg.paths``), where a fact that continues a path
   from a chosen fact can be chosen whatever its score: a new fact touches an entity
   the context's facts join (``Retrieval.fact_reach``).

Each test is a superset of what the retrieval could see, so a context the rule keeps
is never stale. The chat's memo (``rag.chat.memo``) applies it to each item it holds;
warmup's change detector (``warmup.detector``) applies it to the warm registry, which
keeps no facts of an entry: there part 3 uses the lowest bar a held fact can have (the
selector's threshold) and part 4 is left to the scheduled re-check, which re-runs every
entry's retrieval. ``ChangeRule.impact`` computes what a batch can reach once, for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rag.knowledge.models import ChangeSet

#: Stored scores are rounded to 6 places: a chunk that ties the k-th passage (e.g. that
#: very passage) must not count as entering.
SCORE_EPSILON = 1e-5

#: The vectors of the facts the graph now holds for these documents, (n, dim).
FactVectors = Callable[[Sequence[str]], np.ndarray]
#: The keys of the entities the graph's facts of these documents join.
FactEntities = Callable[[Sequence[str]], set[str]]


def _matrix(rows: Iterable[Sequence[float]]) -> np.ndarray:
    kept = [r for r in rows if len(r)]
    return np.asarray(kept, dtype=np.float32) if kept else np.zeros((0, 0), np.float32)


def best_scores(matrix: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Per query row, the best cosine of any row of ``matrix`` (-inf where none)."""
    queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    if not matrix.size or not queries.size:
        return np.full(len(queries), -np.inf, np.float32)
    return np.asarray((queries @ matrix.T).max(axis=1), dtype=np.float32)


@dataclass(frozen=True)
class ChangeImpact:
    """What one batch of changes can reach (see the module doc); built by ``ChangeRule``."""

    removed_chunks: frozenset[str]
    touched_docs: frozenset[str]
    new_chunks: np.ndarray
    new_facts: np.ndarray
    fact_entities: frozenset[str]
    max_facts: int
    min_fact_score: float
    fact_gain: float

    def touches(self, chunk_ids: Iterable[str], doc_ids: Iterable[str]) -> bool:
        """Part 1: a chunk it uses, or a document it came from, changed."""
        return not self.removed_chunks.isdisjoint(chunk_ids) or not self.touched_docs.isdisjoint(
            doc_ids
        )

    def chunks_enter(self, queries: np.ndarray, kth_scores: np.ndarray) -> np.ndarray:
        """Part 2, per query row: a new chunk beats its k-th passage (NaN: no k-th
        passage, so any new chunk may enter)."""
        best = best_scores(self.new_chunks, queries)
        kth = np.nan_to_num(np.asarray(kth_scores, np.float32), nan=-np.inf)
        return np.asarray(self.new_chunks.size > 0) & (best > kth + SCORE_EPSILON)

    def fact_bar(self, fact_scores: Sequence[float]) -> float:
        """Part 3's bar for a context holding facts with these scores."""
        weakest = min(fact_scores, default=self.min_fact_score)
        return weakest if len(fact_scores) >= self.max_facts else min(weakest, self.min_fact_score)

    def facts_enter(self, queries: np.ndarray, bars: np.ndarray | float) -> np.ndarray:
        """Part 3, per query row: a new fact reaches the bar (``fact_bar``; a caller
        that keeps no facts passes ``min_fact_score``, the lowest bar there is)."""
        best = best_scores(self.new_facts, queries)
        return np.asarray(self.new_facts.size > 0) & (
            best + self.fact_gain >= np.asarray(bars, np.float32) - SCORE_EPSILON
        )

    def reaches(self, fact_reach: Iterable[str]) -> bool:
        """Part 4: a new fact touches an entity the context's facts join."""
        return not self.fact_entities.isdisjoint(fact_reach)


class ChangeRule:
    """Builds a batch's ``ChangeImpact`` with what the graph knows of the changed
    documents. ``fact_vectors`` None: no graph (a change's facts cannot enter);
    ``fact_entities`` None: the selector ranks facts by score alone. ``max_facts``,
    ``min_fact_score`` and ``fact_gain`` are the fact selector's slots, threshold and
    the most its score gives a fact over its cosine (``SubgraphSelector.max_gain``)."""

    def __init__(
        self,
        *,
        fact_vectors: FactVectors | None = None,
        fact_entities: FactEntities | None = None,
        max_facts: int = 3,
        min_fact_score: float = 0.3,
        fact_gain: float = 0.0,
    ) -> None:
        self.fact_vectors = fact_vectors
        self.fact_entities = fact_entities
        self.max_facts = max_facts
        self.min_fact_score = min_fact_score
        self.fact_gain = fact_gain

    def impact(self, changes: Sequence[ChangeSet]) -> ChangeImpact | None:
        """What these changes can reach; None when none of them changed anything."""
        changes = [c for c in changes if c.changed]
        if not changes:
            return None
        rewritten = sorted({d for ch in changes for d in (*ch.added, *ch.updated)})
        new_facts = _matrix([])
        if self.fact_vectors is not None and rewritten:
            new_facts = np.asarray(self.fact_vectors(rewritten), dtype=np.float32)
        entities: set[str] = set()
        if self.fact_entities is not None and rewritten:
            entities = self.fact_entities(rewritten)
        return ChangeImpact(
            removed_chunks=frozenset(c for ch in changes for c in ch.removed_chunk_ids),
            touched_docs=frozenset(
                d for ch in changes for d in (*ch.added, *ch.updated, *ch.deleted)
            ),
            new_chunks=_matrix(c.embedding for ch in changes for c in ch.added_chunks),
            new_facts=new_facts,
            fact_entities=frozenset(entities),
            max_facts=self.max_facts,
            min_fact_score=self.min_fact_score,
            fact_gain=self.fact_gain,
        )
