"""The sweep: what expired goes, so that nothing grows without bound.

- Warm entries past their TTL are prefilled again while their queries are still hot
  (or seeds), and retired otherwise.
- The query log forgets queries whose decayed count fell below ``min_count`` (not
  seeds, none backing an entry), and holds at most ``max_rows``: past it, the coldest
  queries that back no entry go first, down to 90% of it (so that one more new
  question does not prune again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from warmup.heat import Heat
from warmup.jobs import JobQueue
from warmup.models import RewarmReason
from warmup.registry import Registry
from warmup.reports import CycleReport
from warmup.warmer import EntryWarmer


@dataclass(kw_only=True)
class Sweeper:
    registry: Registry
    heat: Heat
    warmer: EntryWarmer
    queue: JobQueue
    min_count: float
    max_rows: int
    clock: Callable[[], float]

    async def sweep(self, report: CycleReport) -> None:
        """Expired entries: keep (re-warm) the hot ones, retire the others; then prune
        the query log."""
        now = self.clock()
        for fingerprint in self.registry.fingerprints():
            await self.queue.checkpoint()
            entry = self.registry.entry(fingerprint)
            if entry is None or entry.expires_at > now:
                continue
            report.entries_checked += 1
            if self.heat.is_hot(self.heat.of_entry(fingerprint, now)):
                await self.warmer.rewarm(entry, RewarmReason.EXPIRED_HOT, report)
            else:
                self.warmer.retire(fingerprint, report)
        report.pruned += self.prune()

    @property
    def over_cap(self) -> bool:
        return self.registry.query_count() > self.max_rows

    def prune(self) -> int:
        """Forget cold queries, and the coldest past the row cap; how many went."""
        now = self.clock()
        queries = self.registry.queries()
        loose = [q for q in queries if q.fingerprint is None]  # backing no entry
        heat = {q.key: self.heat.of_query(q, now) for q in loose}
        drop = {q.key for q in loose if not q.seed and heat[q.key] < self.min_count}
        if len(queries) - len(drop) > self.max_rows:
            target = self.max_rows - self.max_rows // 10
            rest = sorted((q.key for q in loose if q.key not in drop), key=lambda k: (heat[k], k))
            drop.update(rest[: len(queries) - len(drop) - target])
        return self.registry.forget(drop)
