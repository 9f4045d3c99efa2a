"""Which warm entries can a knowledge-base change affect?

Only stored data is used — entries' chunk and document ids, and their queries'
stored embeddings with the score of the last passage of their top-k — so that
detection embeds nothing. An entry is affected when a chunk it uses was replaced or
deleted, or when a new chunk scores above its k-th passage for one of its queries
(only then can the new chunk enter that query's top-k).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag.chat.memo import SCORE_EPSILON
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
    def detect(
        self, entries: EntryIndex, queries: QueryMatrix, changes: Sequence[ChangeSet]
    ) -> Detection:
        started = time.perf_counter()
        removed = {c for ch in changes for c in ch.removed_chunk_ids}
        touched_docs = {d for ch in changes for d in (*ch.updated, *ch.deleted)}
        result = Detection()
        if removed or touched_docs:
            for fingerprint, chunk_ids in entries.chunk_ids.items():
                if not removed.isdisjoint(chunk_ids) or not touched_docs.isdisjoint(
                    entries.doc_ids[fingerprint]
                ):
                    result.affected.add(fingerprint)
        result.by_removed_chunks = len(result.affected)

        new_vectors = [c.embedding for ch in changes for c in ch.added_chunks if c.embedding]
        if new_vectors and len(queries.keys):
            chunks = np.asarray(new_vectors, dtype=np.float32)
            best = (queries.embeddings @ chunks.T).max(axis=1)
            # A chunk that ties the k-th passage (e.g. that very passage) is not entering.
            entering = np.nonzero(best > queries.kth_scores + SCORE_EPSILON)[0]
            before = len(result.affected)
            result.affected.update(queries.fingerprints[i] for i in entering)
            result.by_new_chunks = len(result.affected) - before

        result.unaffected = set(entries.chunk_ids) - result.affected
        result.seconds = time.perf_counter() - started
        return result
