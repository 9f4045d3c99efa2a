"""Which warm entries can a knowledge-base change affect?

The one change rule (``rag.chat.change_rule``), applied to the warm registry with
stored data only — entries' chunk and document ids, and their queries' stored
embeddings with the score of the last passage of their top-k — so that detection
embeds nothing. The registry keeps no facts of an entry: the rule's fact test runs
with the lowest bar a held fact can have, and its path-reach test is left to the
scheduled re-check. An affected entry is only re-retrieved; it is re-warmed when its
context really changed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag.chat.change_rule import ChangeRule
from rag.knowledge.models import ChangeSet
from warmup.registry import EntryIndex, QueryMatrix


@dataclass
class Detection:
    affected: set[str] = field(default_factory=set)
    unaffected: set[str] = field(default_factory=set)
    by_removed_chunks: int = 0
    by_new_chunks: int = 0
    seconds: float = 0.0


class ChangeDetector:
    def __init__(self, rule: ChangeRule | None = None) -> None:
        self.rule = rule or ChangeRule()

    def detect(
        self, entries: EntryIndex, queries: QueryMatrix, changes: Sequence[ChangeSet]
    ) -> Detection:
        started = time.perf_counter()
        result = Detection()
        impact = self.rule.impact(changes)
        if impact is not None:
            for fingerprint, chunk_ids in entries.chunk_ids.items():
                if impact.touches(chunk_ids, entries.doc_ids[fingerprint]):
                    result.affected.add(fingerprint)
            result.by_removed_chunks = len(result.affected)
            if len(queries.keys):
                entering = impact.chunks_enter(queries.embeddings, queries.kth_scores)
                entering |= impact.facts_enter(queries.embeddings, impact.min_fact_score)
                before = len(result.affected)
                result.affected.update(queries.fingerprints[i] for i in np.nonzero(entering)[0])
                result.by_new_chunks = len(result.affected) - before
        result.unaffected = set(entries.chunk_ids) - result.affected
        result.seconds = time.perf_counter() - started
        return result
