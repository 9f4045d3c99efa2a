"""Path-aware, redundancy-aware choice of a question's few triples.

Ranking each candidate triple by its own similarity to the question fills the slots with
near-duplicates about the question's entity on a two-step question ("Where is the company
that makes the Aquila sensor based?": *Aquila sold in Northern Europe*, *growers use
Aquila*, *Aquila made by Brightfield*) and leaves out the triple that answers
(*Brightfield based in Tamsworth*, cosine 0.23), whose text shares little with the
question. So the triples are chosen one
at a time, greedily, each scored against what is already chosen:

    score = max(relevance + intent_bonus · [its predicate names the relation asked for
                                           and it touches an entity reached so far],
                path credit)
            - similarity_weight · (its highest cosine to a chosen triple)
            - same_pair_penalty · [it joins two entities a chosen triple joins]

*Relevance* is the plain ranking's score (cosine to the question, plus the passage boost).
The entities *reached* start as those the question and its passages link to; each chosen
triple adds both of its ends. *Path credit*: once a chosen triple leaves the question's
own entity (*Aquila made by Brightfield*), a triple naming the relation asked for from its
other end (*Brightfield based in Tamsworth*) is worth ``path_decay`` × the chosen triple's
score + ``path_own_weight`` × its own relevance, however little its text shares with the
question. The relation asked for comes from ``kg.intent``. The penalties are maximal
marginal relevance: a triple that restates a chosen one (an inverse or synonymous
predicate over the same two entities, or nearly the same text) gives way to one that adds
information.

Deterministic: equal scores (rounded) are taken in triple-text order. What a new triple
needs to be chosen, which the context memo relies on: a score at most ``max_gain`` above
its relevance, or a path from an entity a chosen triple joins (``Retrieval.fact_reach``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kg.index import GraphSnapshot
from kg.intent import RelationIntent
from kg.models import SCORE_DECIMALS
from kg.snapshot_lists import take


@dataclass(frozen=True)
class PathWeights:
    """The weights of the greedy score (module docstring); measured on the graph-quality
    benchmark (``bench/kg_multihop.py``)."""

    intent_bonus: float = 0.2
    path_decay: float = 0.9
    path_own_weight: float = 0.2
    similarity_weight: float = 0.15
    same_pair_penalty: float = 0.5

    @property
    def max_gain(self) -> float:
        """The most a triple's score can exceed its relevance."""
        return self.intent_bonus


#: The default weights (``WARMRAG_KG_PATH_AWARE=true``).
DEFAULT_WEIGHTS = PathWeights()


def rank_paths(
    snap: GraphSnapshot,
    candidates: np.ndarray,
    vectors: np.ndarray,
    relevance: np.ndarray,
    intent: RelationIntent,
    seeds: list[int],
    named: list[int],
    max_triples: int,
    min_score: float,
    weights: PathWeights,
) -> list[tuple[float, int]]:
    """Up to ``max_triples`` (score, edge) chosen greedily, best first; one edge per fact,
    none under ``min_score``. ``seeds``: every node the question linked to (``named`` and
    its passages' entities); ``named``: the nodes the question itself names; ``vectors``:
    the candidates' triple vectors, as the relevance was scored from."""
    matches = np.zeros(candidates.size, dtype=bool)
    if intent:
        predicates = take(snap.edge_predicate, candidates)
        by_predicate = {p: intent.matches(p) for p in set(predicates)}
        matches = np.fromiter(
            (by_predicate[p] for p in predicates), dtype=bool, count=len(predicates)
        )
    # Under the threshold even with the bonus, only a path can lift a triple: one that
    # names the relation asked for.
    keep = np.flatnonzero((relevance + weights.intent_bonus * matches >= min_score) | matches)
    candidates, relevance, matches = candidates[keep], relevance[keep], matches[keep]
    vectors = vectors[keep]
    subjects, objects = snap.edge_subject[candidates], snap.edge_object[candidates]
    groups = snap.edge_group[candidates]
    reached = np.zeros(len(snap.node_keys), dtype=bool)
    reached[np.asarray(seeds, dtype=np.int64)] = True
    # Ends a path has gone on from: the question's own entities are its start.
    walked = np.zeros(len(snap.node_keys), dtype=bool)
    walked[np.asarray(named, dtype=np.int64)] = True
    open_ = np.ones(candidates.size, dtype=bool)
    likeness = np.zeros(candidates.size)
    same_pair = np.zeros(candidates.size, dtype=bool)
    # What a triple inherits from the chosen triple whose new end it continues from.
    path = np.full(candidates.size, -np.inf)
    chosen: list[tuple[float, int]] = []
    while len(chosen) < max_triples and open_.any():
        touches = reached[subjects] | reached[objects]
        base = np.maximum(relevance + weights.intent_bonus * (matches & touches), path)
        score = base - weights.similarity_weight * likeness - weights.same_pair_penalty * same_pair
        score = np.round(score, SCORE_DECIMALS)
        score[~open_] = -np.inf
        best = score.max()
        if best < min_score:
            break
        tied = np.flatnonzero(score == best)
        i = int(min(tied, key=lambda j: (snap.edge_text[int(candidates[j])], int(candidates[j]))))
        chosen.append((float(best), int(candidates[i])))
        open_ &= groups != groups[i]
        s, o = subjects[i], objects[i]
        same_pair |= ((subjects == s) & (objects == o)) | ((subjects == o) & (objects == s))
        if walked[s] or walked[o]:
            # A triple naming the relation asked for, from this one's other end, continues
            # the question's path: as relevant as this step, a little less, plus a share
            # of its own relevance (which of two continuations fits the question better).
            ends = [n for n in (s, o) if not walked[n]]
            onward = matches & (np.isin(subjects, ends) | np.isin(objects, ends))
            inherited = weights.path_decay * best + weights.path_own_weight * relevance
            path = np.where(onward, np.maximum(path, inherited), path)
            walked[ends] = True
        reached[[s, o]] = True
        likeness = np.maximum(likeness, np.einsum("ij,j->i", vectors, vectors[i]))
    return chosen
