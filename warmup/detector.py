"""Which warm entries can a knowledge-base change affect?

The one change rule (``rag.chat.change_rule``), applied to the warm registry with
stored data only — entries' chunk and document ids, and their queries' stored
embeddings with the bars their contexts set (``ContextBars``: the score of the last
passage of their top-k, and of their weakest fact while every fact slot is taken) — so
that detection embeds nothing. The registry keeps no facts of an entry: the rule's
path-reach test is left to the scheduled re-check. An affected entry is only
re-retrieved; it is re-warmed when its context really changed.

Measured on the real corpus (242 warm entries, one section changed at a time, ten
times), the affected entries per change: 227 of 242 on average when every fact of the
changed document was tested against the lowest bar a held fact can have (the
selector's threshold less its gain, 0.1); 121 with each query's own bar; 27 with each
query's bar and only the facts new to the graph (``ChangeSet.new_facts``). The same
entries were re-warmed all three ways (``docs/performance.md``).
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
                entering |= impact.facts_enter(queries.embeddings, queries.fact_bars)
                before = len(result.affected)
                result.affected.update(queries.fingerprints[i] for i in np.nonzero(entering)[0])
                result.by_new_chunks = len(result.affected) - before
        result.unaffected = set(entries.chunk_ids) - result.affected
        result.seconds = time.perf_counter() - started
        return result
