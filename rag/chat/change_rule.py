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
   top-k (``Retrieval.entry_bar``, ``rag.chat.change_rule.kth_score``);
3. a fact the batch brought into the graph (``ChangeSet.new_facts``) scores above the
   weakest fact it injects (or the selector's threshold while it has free slots), less
   the most the selector adds to a fact's score over its cosine;
4. with path-aware fact selection (``kg.paths``), where a fact that continues a path
   from a chosen fact can be chosen whatever its score: a new fact touches an entity
   the context's facts join (``Retrieval.fact_reach``).

Each test is a superset of what the retrieval could see, so a context the rule keeps
is never stale. The chat's memo (``rag.chat.memo``) applies it to each item it holds;
warmup's change detector (``warmup.detector``) applies it to the warm registry, which
keeps each query's two bars (``ContextBars``: its k-th passage's score and its weakest
fact's) and no facts: there part 4 is left to the scheduled re-check, which re-runs
every entry's retrieval. ``ChangeRule.impact`` computes what a batch can reach once, for
both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rag.knowledge.models import ChangeSet

if TYPE_CHECKING:
    from rag.chat.retriever import Retrieval

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


def kth_score(retrieval: Retrieval) -> float | None:
    """Part 2's bar: the score a new chunk must beat to enter a top-k: its last
    passage's, or the retrieval's own bar where a rerank could promote a weaker chunk
    (``Retrieval.entry_bar``). None: no passage, so any chunk may enter."""
    if retrieval.entry_bar is not None:
        return retrieval.entry_bar
    return retrieval.passages[-1].score if retrieval.passages else None


@dataclass(frozen=True)
class ContextBars:
    """What a new chunk and a new fact must reach to be able to enter one context
    (parts 2 and 3), kept so that the rule can be applied without the context itself.

    ``chunk``: ``kth_score``; None: any new chunk may enter. ``fact``: the weakest
    injected fact's score while every fact slot is taken; None while a slot is free
    (then the selector's threshold is the bar), and for a context whose facts were not
    kept (a registry written before the bar was: the lowest bar a held fact can have,
    the threshold, is right for it too)."""

    chunk: float | None = None
    fact: float | None = None


@dataclass(frozen=True)
class ChangeImpact:
    """What one batch of changes can reach (see the module doc); built by ``ChangeRule``."""

    removed_chunks: frozenset[str]
    touched_docs: frozenset[str]
    new_chunks: np.ndarray
    new_facts: np.ndarray
    fact_entities: frozenset[str]
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

    def facts_enter(self, queries: np.ndarray, fact_bars: np.ndarray) -> np.ndarray:
        """Part 3, per query row: a new fact, with the most the selector can add to its
        cosine, reaches the row's ``ContextBars.fact`` (NaN: the selector's threshold,
        the lowest bar a held fact can have)."""
        best = best_scores(self.new_facts, queries)
        bars = np.asarray(fact_bars, np.float32)
        bars = np.where(np.isnan(bars), np.float32(self.min_fact_score), bars)
        return np.asarray(self.new_facts.size > 0) & (best + self.fact_gain >= bars - SCORE_EPSILON)

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

    def bars(self, retrieval: Retrieval) -> ContextBars:
        """The bars one retrieved context sets (parts 2 and 3)."""
        scores = [f.score for f in retrieval.facts]
        full = bool(scores) and len(scores) >= self.max_facts
        return ContextBars(kth_score(retrieval), min(scores) if full else None)

    def impact(self, changes: Sequence[ChangeSet]) -> ChangeImpact | None:
        """What these changes can reach; None when none of them changed anything."""
        changes = [c for c in changes if c.changed]
        if not changes:
            return None
        rewritten = sorted({d for ch in changes for d in (*ch.added, *ch.updated)})
        new_facts = _matrix([])
        if self.fact_vectors is not None:
            new_facts = self._new_facts(changes)
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
            min_fact_score=self.min_fact_score,
            fact_gain=self.fact_gain,
        )

    def _new_facts(self, changes: Sequence[ChangeSet]) -> np.ndarray:
        """The facts the changes brought into the graph; for a change that did not
        note them (``ChangeSet.new_facts`` None), every fact its documents state now."""
        assert self.fact_vectors is not None
        unknown = sorted(
            {d for ch in changes if ch.new_facts is None for d in (*ch.added, *ch.updated)}
        )
        parts = [_matrix(ch.new_facts) for ch in changes if ch.new_facts]
        if unknown:
            parts.append(np.asarray(self.fact_vectors(unknown), dtype=np.float32))
        parts = [p for p in parts if p.size]
        return np.concatenate(parts) if parts else _matrix([])
