"""Restore: put registered entries back into vLLM's cache, and drop the ones not worth it.

- Start-up (seed 000, ch. 1): a (re)started vLLM holds none of the registry. The
  hottest entries that fit the budget are prefilled before ``/ready``
  (``restore_max_entries``), the rest that fit follow in the background; those over
  budget are retired.
- Eviction: a chat on a registered prefix found its blocks gone; prefill it again.
- Expiry (the TTL sweep): an expired entry is prefilled again while its queries are
  still hot (or seeds), and retired otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

from warmup.budget import WarmBudget
from warmup.heat import Heat
from warmup.jobs import JobQueue
from warmup.models import RewarmReason, WarmEntry
from warmup.planner import split_steps
from warmup.registry import Registry
from warmup.reports import CycleReport
from warmup.warmer import EntryWarmer


class Restorer:
    def __init__(
        self,
        registry: Registry,
        heat: Heat,
        warmer: EntryWarmer,
        queue: JobQueue,
        *,
        budget: Callable[[], WarmBudget],
        steps: int,
        restore_max_entries: int,
        clock: Callable[[], float],
    ) -> None:
        self.registry = registry
        self.heat = heat
        self.warmer = warmer
        self.queue = queue
        self.budget = budget
        self.steps = steps
        self.restore_max_entries = restore_max_entries
        self.clock = clock
        self.started_at = 0.0
        self._evicted: set[str] = set()

    async def restore(self, report: CycleReport) -> list[str]:
        """Prefill the hottest entries within budget, in progressive steps; retire those
        over budget. Returns the fingerprints left for ``restore_later``."""
        now = self.started_at = self.clock()
        room = self.budget().max_tokens
        keep: list[WarmEntry] = []
        for fingerprint in self.heat.hottest_first(self.registry.fingerprints(), now):
            entry = self.registry.entry(fingerprint)
            if entry is not None and entry.prefix_tokens <= room:
                keep.append(entry)
                room -= entry.prefix_tokens
            else:
                self.warmer.retire(fingerprint, report)
        first, later = keep[: self.restore_max_entries], keep[self.restore_max_entries :]
        if not await self._prefill_steps(first, report):
            for entry in later:
                self.warmer.retire(entry.fingerprint, report)
            return []
        return [e.fingerprint for e in later]

    async def _prefill_steps(self, entries: list[WarmEntry], report: CycleReport) -> bool:
        """Past the KV-usage threshold after a step, retire the rest and return False."""
        done = 0
        for step in split_steps(entries, self.steps):
            for entry in step:
                await self.queue.checkpoint()
                await self.warmer.rewarm(entry, RewarmReason.STARTUP, report)
            done += len(step)
            if await self.warmer.kv_full():
                report.stopped_by_kv_usage = True
                for rest in entries[done:]:
                    self.warmer.retire(rest.fingerprint, report)
                return False
        return True

    async def restore_later(self, fingerprints: list[str], report: CycleReport) -> None:
        """The entries past the start-up cap, one prefill at a time behind everything
        more urgent."""
        for fingerprint in fingerprints:
            await self.queue.checkpoint()
            entry = self.registry.entry(fingerprint)
            if entry is None or entry.warmed_at > self.started_at:
                continue  # retired, or warmed again meanwhile
            await self.warmer.rewarm(entry, RewarmReason.STARTUP, report)
            if await self.warmer.kv_full():
                report.stopped_by_kv_usage = True
                break

    def mark_evicted(self, fingerprint: str) -> None:
        self._evicted.add(fingerprint)

    async def rewarm_evicted(self, report: CycleReport) -> None:
        while self._evicted:
            fingerprint = min(self._evicted)
            self._evicted.discard(fingerprint)
            await self.queue.checkpoint()
            if (entry := self.registry.entry(fingerprint)) is not None:
                await self.warmer.rewarm(entry, RewarmReason.EVICTED, report)

    async def sweep(self, report: CycleReport) -> None:
        """Expired entries: keep (re-warm) the hot ones, retire the others."""
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
