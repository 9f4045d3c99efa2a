"""Keep the hot warm entries resident in vLLM's cache.

vLLM has no pin and no TTL: a prefix block stays only while it is not the least
recently used one when a new block is needed. With the residency index
(``warmup.tracker``), warmup sees what the cache does and acts before a user misses:

- **Eviction, seen as it happens.** A ``BlockRemoved`` event for a block of a hot
  entry queues its re-warm at once (``RewarmReason.KV_EVICTED``), ahead of routine
  work, instead of waiting for a chat to find it cold.
- **Soft pinning.** A hot entry whose age (blocks vLLM stored since a request last
  used it) passes ``retouch_at`` of the cache is *re-touched*: its prefix is sent
  again. Fully cached, that costs vLLM a few tokens' compute, and moves its blocks to
  the LRU's far end. Re-touches take at most ``retouch_share`` of the time (the time
  each re-touch request itself took, not its wait for a prefill in flight: counted
  with the wait, the first re-touches on the hot-set benchmark used up the budget and
  the entries then fell off the tail at 0.8 of the cache) and stop while vLLM's KV
  usage is past the warmup threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from warmup.heat import Heat
from warmup.jobs import Priority
from warmup.metrics import WarmupMetrics
from warmup.models import RewarmReason
from warmup.registry import Registry
from warmup.reports import CycleKind, CycleReport
from warmup.residency import Residence
from warmup.restore import Restorer
from warmup.tracker import ResidencyTracker
from warmup.warmer import EntryWarmer

log = logging.getLogger(__name__)

Body = Callable[[CycleReport], Awaitable[None]]
Spawn = Callable[[Priority, CycleKind, Body], None]


class RetouchBudget:
    """Re-touch work within ``share`` of the time since start."""

    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self.clock = clock
        self.since = clock()
        self.spent_s = 0.0

    def allows(self) -> bool:
        return self.share > 0 and self.spent_s <= self.share * (self.clock() - self.since)

    def spend(self, seconds: float) -> None:
        self.spent_s += seconds


class ResidencyKeeper:
    def __init__(
        self,
        tracker: ResidencyTracker,
        registry: Registry,
        heat: Heat,
        restorer: Restorer,
        entries: EntryWarmer,
        metrics: WarmupMetrics,
        spawn: Spawn,
        *,
        retouch_at: float,
        retouch_share: float,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tracker = tracker
        self.registry = registry
        self.heat = heat
        self.restorer = restorer
        self.entries = entries
        self.metrics = metrics
        self.spawn = spawn
        self.retouch_at = retouch_at
        self.budget = RetouchBudget(retouch_share, monotonic)
        self.check_interval_s = check_interval_s
        self.clock = clock
        self.monotonic = monotonic
        self.retouches = 0
        self.evicted_rewarms = 0
        self.mispredicted = 0
        self._warned_silent = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Listen for evictions and check the LRU clock every ``check_interval_s``."""
        self._loop = asyncio.get_running_loop()
        for index in self.tracker.indexes.values():
            index.on_evicted = self._evicted_from_thread
        if self._task is None and self.budget.share > 0 and self.tracker.enabled:
            self._task = asyncio.create_task(self._watch(), name="residency-keeper")

    async def aclose(self) -> None:
        for index in self.tracker.indexes.values():
            index.on_evicted = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def observe_chat(self, fingerprint: str, warm_part_cached: bool) -> None:
        """A chat on a registered entry: check the index's prediction against what vLLM
        served (``warm_part_cached``: all its warmed blocks came from cache), then
        note the use (its blocks are resident and the most recent now)."""
        lost = self.tracker.lost_since_use(fingerprint)
        if lost is not None and lost == warm_part_cached:
            self.mispredicted += 1
            self.metrics.mispredictions.inc()
        self.tracker.used(fingerprint)

    def update_gauges(self) -> None:
        for state, count in self.tracker.summary().entries.items():
            self.metrics.resident_entries.labels(state.value).set(count)

    # ----- eviction --------------------------------------------------------------------

    def _evicted_from_thread(self, fingerprints: set[str]) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown)
                self._loop.call_soon_threadsafe(self.evicted, fingerprints)

    def evicted(self, fingerprints: set[str]) -> int:
        """vLLM evicted a block of each of ``fingerprints``: queue the hot ones' re-warm
        (the cold ones stay registered; a chat that finds them cold re-warms them)."""
        now = self.clock()
        hot = [
            fp
            for fp in fingerprints
            if fp in self.registry and self.heat.is_hot(self.heat.of_entry(fp, now))
        ]
        for fp in hot:
            self.restorer.mark_evicted(fp, RewarmReason.KV_EVICTED)
        if hot:
            self.evicted_rewarms += len(hot)
            self.spawn(Priority.URGENT, CycleKind.EVICTED, self.restorer.rewarm_evicted)
        return len(hot)

    # ----- soft pinning ----------------------------------------------------------------

    def due(self) -> list[str]:
        """Hot entries, hottest first, fully resident but near the LRU tail."""
        now = self.clock()
        out = []
        for fp in self.heat.hottest_first(self.tracker.tracked(), now):
            if not self.heat.is_hot(self.heat.of_entry(fp, now)):
                break
            residency = self.tracker.state(fp)
            if residency is None or residency.state is not Residence.FULL:
                continue
            if self.tracker.pressure(fp) >= self.retouch_at:
                out.append(fp)
        return out

    def events_missing(self) -> bool:
        """Entries were warmed (vLLM stored blocks for them) but no event ever came: the
        server publishes none, or to another endpoint. Logged once."""
        silent = len(self.tracker.tracked()) >= 3 and self.tracker.summary().stored_blocks == 0
        if silent and not self._warned_silent:
            self._warned_silent = True
            log.warning(
                "no KV events from vLLM although %d entries were warmed: check its "
                "--kv-events-config and WARMRAG_VLLM_KV_EVENTS_ENDPOINTS; until events "
                "arrive, the residency shown is what warmup sent, not what vLLM kept",
                len(self.tracker.tracked()),
            )
        return silent

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                if self.events_missing():
                    continue
                if self.budget.allows() and self.due():
                    self.spawn(Priority.URGENT, CycleKind.RETOUCH, self.retouch)
            except Exception:  # never let the watcher die with the service running
                log.exception("residency keeper: check failed")

    async def retouch(self, report: CycleReport) -> None:
        """Re-send the due entries' prefixes, hottest first, within the work budget."""
        self.tracker.keep_only(self.registry.fingerprints())
        for fp in self.due():
            if not self.budget.allows() or await self.entries.kv_full():
                break
            entry = self.registry.entry(fp)
            if entry is None:
                continue
            await self.entries.rewarm(entry, RewarmReason.RETOUCH, report)
            took = self.entries.warmer.last_prefill_s
            self.budget.spend(took)
            self.retouches += 1
            self.metrics.retouch_seconds.inc(took)
