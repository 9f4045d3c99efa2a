"""How hot a query or a warm entry is: the one order every warmup decision follows.

A query's heat is its exponentially decayed count of sightings, plus the hot
threshold for a seed (so a seed stays hot). An entry's heat is the sum over the
queries that point to it. A question predicted from a document is a seed with no
sighting: it ranks below every question users really asked.
"""

from __future__ import annotations

from collections.abc import Iterable

from warmup.models import QueryRecord
from warmup.registry import Registry, decayed


class Heat:
    def __init__(self, registry: Registry, *, half_life_s: float, hot_min_count: float) -> None:
        self.registry = registry
        self.half_life_s = half_life_s
        self.hot_min_count = hot_min_count

    def of_query(self, query: QueryRecord, now: float) -> float:
        seed = self.hot_min_count if query.seed else 0.0
        return seed + decayed(query.count, query.last_seen, now, self.half_life_s)

    def of_entry(self, fingerprint: str, now: float) -> float:
        queries = (self.registry.query(key) for key in self.registry.keys_of(fingerprint))
        return sum(self.of_query(q, now) for q in queries if q is not None)

    def is_hot(self, heat: float) -> bool:
        return heat >= self.hot_min_count

    def hottest_first(self, fingerprints: Iterable[str], now: float) -> list[str]:
        """Hottest entry first (ties by fingerprint, so the order is stable)."""
        heat = {fp: self.of_entry(fp, now) for fp in fingerprints}
        return sorted(heat, key=lambda fp: (-heat[fp], fp))
