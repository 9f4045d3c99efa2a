"""Restore: put registered entries back into vLLM's cache.

- Start-up (the cold-start design): a (re)started vLLM holds none of the registry. The
  hottest entries that fit the budget are prefilled before ``/ready``
  (``restore_max_entries``), the rest that fit follow in the background; those over
  budget are retired.
- Eviction: a chat on a registered prefix found its blocks gone; prefill it again.
- Failover: the vLLM replica that held entries went down; prefill them again (the
  router sends each to its next replica).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from warmup.budget import WarmBudget
from warmup.heat import Heat
from warmup.jobs import JobQueue
from warmup.models import DeclineReason, RewarmReason, WarmEntry
from warmup.planner import split_steps
from warmup.registry import Registry
from warmup.reports import CycleReport
from warmup.warmer import EntryWarmer


@dataclass(kw_only=True)
class Restorer:
    registry: Registry
    heat: Heat
    warmer: EntryWarmer
    queue: JobQueue
    budget: Callable[[], WarmBudget]
    steps: int
    restore_max_entries: int
    clock: Callable[[], float]
    started_at: float = field(default=0.0, init=False)
    _evicted: dict[str, RewarmReason] = field(default_factory=dict, init=False)

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
                report.decline(DeclineReason.OVER_BUDGET, int(entry is not None))
                self.warmer.retire(fingerprint, report)
        first, later = keep[: self.restore_max_entries], keep[self.restore_max_entries :]
        if not await self._prefill_steps(first, report):
            report.decline(DeclineReason.KV_FULL, len(later))
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
                report.decline(DeclineReason.KV_FULL, len(entries) - done)
                for rest in entries[done:]:
                    self.warmer.retire(rest.fingerprint, report)
                return False
        return True

    async def restore_later(self, fingerprints: list[str], report: CycleReport) -> None:
        """The entries past the start-up cap, one prefill at a time behind everything
        more urgent."""
        for i, fingerprint in enumerate(fingerprints):
            await self.queue.checkpoint()
            entry = self.registry.entry(fingerprint)
            if entry is None or entry.warmed_at > self.started_at:
                continue  # retired, or warmed again meanwhile
            await self.warmer.rewarm(entry, RewarmReason.STARTUP, report)
            if await self.warmer.kv_full():
                report.stopped_by_kv_usage = True
                report.decline(DeclineReason.KV_FULL, len(fingerprints) - i - 1)
                break

    def mark_evicted(self, fingerprint: str, reason: RewarmReason = RewarmReason.EVICTED) -> None:
        self._evicted.setdefault(fingerprint, reason)

    def pending(self, fingerprint: str) -> RewarmReason | None:
        """Why the entry waits for a re-warm (evicted, or its replica failed); else None."""
        return self._evicted.get(fingerprint)

    async def rewarm_evicted(self, report: CycleReport) -> None:
        """Warm every marked entry again, hottest first (ordered once per batch: a
        failed replica can mark thousands; marks added meanwhile make the next batch)."""
        while self._evicted:
            for fingerprint in self.heat.hottest_first(list(self._evicted), self.clock()):
                reason = self._evicted.pop(fingerprint, None)
                if reason is None:
                    continue
                await self.queue.checkpoint()
                if (entry := self.registry.entry(fingerprint)) is not None:
                    await self.warmer.rewarm(entry, reason, report)
