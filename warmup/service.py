"""The warmup layer's coordinator: ``WarmupService`` builds the parts, wires them, and
is what the rest of warmrag calls.

Each part has one job and owns its state (the package's doc lists them); every job
runs through one ``JobQueue``, most urgent first, and long jobs yield to urgent ones
between prefills.

The public coroutines queue their job and wait for its report, so routes, the
scheduler and tests see one call per operation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from rag.chat.memo import ContextMemo
from rag.chat.prompt import PromptBuilder, PromptPrefix
from rag.chat.results import WarmState
from rag.chat.retriever import Retrieval, Retriever
from rag.knowledge.models import ChangeSet
from rag.llm.client import LLMEngine, Usage
from warmup.budget import ChatShape, WarmBudget
from warmup.changes import ChangeHandler
from warmup.context import ContextResolver
from warmup.cycles import Cycles
from warmup.heat import Heat
from warmup.hits import count_lookup, entry_warm_state
from warmup.hot import HotWarmup
from warmup.jobs import JobQueue, Priority
from warmup.journal import Journal
from warmup.keeper import ResidencyKeeper
from warmup.metrics import WarmupMetrics
from warmup.models import RewarmReason
from warmup.planner import WarmupPlanner
from warmup.registry import Registry
from warmup.reports import CycleKind, CycleReport, ReportLog
from warmup.restore import Restorer
from warmup.settings import WarmupSettings
from warmup.store import Snapshot, WarmupStore
from warmup.sweep import Sweeper
from warmup.tracker import ResidencyTracker
from warmup.view import WarmupView, describe
from warmup.warmer import EntryWarmer, Warmer

log = logging.getLogger(__name__)


class WarmupService:
    def __init__(
        self,
        settings: WarmupSettings,
        store: WarmupStore,
        retriever: Retriever,
        builder: PromptBuilder,
        llm: LLMEngine,
        warmer: Warmer,
        metrics: WarmupMetrics,
        *,
        top_k: int,
        chat_shape: ChatShape,
        memo: ContextMemo,
        tracker: ResidencyTracker | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``top_k`` and ``chat_shape`` are the chat path's own settings: warmup must
        retrieve what a chat retrieves, and size entries by what its prompts take.
        ``memo``: the contexts chats remember, shared so that each question is
        retrieved once for both; whoever owns it makes it forget what a change moved
        (the composition root, on every change), and its change rule is the one the
        detector applies to the registry. ``tracker``: the residency index of each
        vLLM server that publishes KV events (None: warmup infers from chats)."""
        s = self.settings = settings
        self.store = store
        self.llm = llm
        self.warmer = warmer
        self.metrics = metrics
        self.clock = clock  # tests move time by replacing it
        self.chat_shape = chat_shape
        self.budget: WarmBudget | None = None
        self.registry = Registry(persist=self._persist)
        self.journal = Journal(store, self._snapshot)
        self.queue = JobQueue()
        self._reports = ReportLog(self._now, lambda: retriever.kb.version, self._finished)
        self.cycles = Cycles(self.queue, self._reports)
        self.heat = Heat(self.registry, half_life_s=s.half_life_s, hot_min_count=s.hot_min_count)
        self.context = ContextResolver(
            retriever,
            builder,
            self.registry,
            top_k=top_k,
            memo=memo,
        )
        self.entries = EntryWarmer(
            warmer,
            self.registry,
            llm,
            metrics,
            budget=self._budget,
            ttl_s=s.ttl_s,
            kv_usage_threshold=s.kv_usage_threshold,
            clock=self._now,
            tracker=tracker,
        )
        self.hot = HotWarmup(
            self.registry,
            self.heat,
            self.context,
            self.entries,
            WarmupPlanner(s.steps),
            self.queue,
            budget=self._budget,
            synthetic_queries=s.synthetic_queries,
            clock=self._now,
        )
        self.changes = ChangeHandler(
            self.registry,
            self.heat,
            self.context,
            self.entries,
            self.hot,
            self.queue,
            retriever.kb,
            metrics,
            rule=memo.rule,
            follows_kb=s.strategy.follows_kb,
            debounce_s=s.debounce_s,
            document_queries=s.document_queries,
            query_source=s.document_query_source,
            on_quiet=self._changes_quiet,
            persist=self._persist,
            clock=self._now,
        )
        self.restorer = Restorer(
            registry=self.registry,
            heat=self.heat,
            warmer=self.entries,
            queue=self.queue,
            budget=self._budget,
            steps=s.steps,
            restore_max_entries=s.restore_max_entries,
            clock=self._now,
        )
        self.sweeper = Sweeper(
            registry=self.registry,
            heat=self.heat,
            warmer=self.entries,
            queue=self.queue,
            min_count=s.query_log_min_count,
            max_rows=s.query_log_max_rows,
            clock=self._now,
        )
        self.keeper = (
            ResidencyKeeper(tracker, self.registry, self.heat, self.restorer, self.entries,
                            metrics, self.cycles.spawn, retouch_at=s.retouch_at,
                            retouch_share=s.retouch_share, clock=self._now)
            if tracker is not None else None
        )  # fmt: skip

    # ----- state ---------------------------------------------------------------------

    def open(self) -> None:
        """Open the store and load the registry and the undetected changes from it
        (blocking: run it in a thread)."""
        self.store.open()
        snapshot = self.store.load()
        self.registry.load(snapshot)
        self.changes.load(snapshot.pending)
        self._update_gauges()

    def _persist(self, write: Callable[[WarmupStore], None]) -> None:
        self.journal.write(write)

    def _snapshot(self) -> Snapshot:
        """Everything the store should hold (the journal rewrites it after a failure)."""
        snapshot = self.registry.snapshot()
        snapshot.pending = self.changes.unfinished()
        return snapshot

    @property
    def reports(self) -> Sequence[CycleReport]:
        """The recent cycles that did something, oldest first."""
        return self._reports.recent

    @property
    def started(self) -> bool:
        """True once ``start`` has sized the budget (the admin routes answer then)."""
        return self.budget is not None

    def view(self) -> WarmupView:
        """The registry, budget and totals as the admin API shows them."""
        return describe(
            self.registry,
            self.restorer,
            self.budget,
            self.changes.pending,
            self.warmer.requests_sent,
            self._reports,
            self.keeper,
        )

    # ----- start-up ------------------------------------------------------------------

    async def start(self) -> CycleReport:
        """Start-up warmup (also after a vLLM restart): read the budget from vLLM,
        count the cold start, bring the registry in step with the knowledge base
        (changes left undetected, entries built from text it no longer holds), then
        re-warm the hottest entries."""
        cache = await self.llm.cache_config()
        entry = self.settings.entry_max_tokens or self.chat_shape.entry_share(cache.block_size)
        self.budget = WarmBudget.from_cache(cache, entry, self.settings.budget_share)
        self.metrics.budget_tokens.set(self.budget.max_tokens)
        if self.keeper is not None:
            self.keeper.tracker.configure(cache.block_size, cache.num_blocks)
            self.keeper.start()
        self.metrics.cold_starts.inc()
        log.info(
            "warm budget: %s; strategy %s", self.budget.describe(), self.settings.strategy.value
        )
        await self.cycles.run(Priority.CHANGE, CycleKind.KB_CHANGE, self._catch_up)
        report = await self.restore()
        if self.settings.strategy.sends_synthetic:
            await self.send_synthetic()
        return report

    async def restore(self) -> CycleReport:
        """Prefill persisted entries, hottest first, within budget; retire the rest.
        The hottest ``restore_max_entries`` are warmed before this returns; the others
        that fit follow in the background."""
        return await self.cycles.run(Priority.URGENT, CycleKind.RESTORE, self._restore)

    async def _restore(self, report: CycleReport) -> None:
        if later := await self.restorer.restore(report):
            rest = partial(self.restorer.restore_later, later)
            self.cycles.spawn(
                Priority.BACKGROUND, CycleKind.RESTORE_BACKGROUND, rest, coalesce=False
            )

    # ----- chats ---------------------------------------------------------------------

    def on_chat(
        self, key: str, retrieval: Retrieval, prefix: PromptPrefix, usage: Usage
    ) -> WarmState:
        """Log the question under its query ``key``; return how its prefix stood against
        the registry.

        On the request path: it reads and changes the in-memory registry only; the
        journal writes the changes to SQLite later, off this path, so a locked or full
        database never fails or delays a chat."""
        if not self.settings.strategy.uses_registry:
            self.metrics.record_chat(False)
            return WarmState.COLD
        now = self.clock()
        record = self.registry.record_query(
            key, retrieval.question, retrieval.embedding, now, self.settings.half_life_s
        )
        if self.sweeper.over_cap:  # prune now, off the request path (else the sweep does)
            self.queue.spawn(Priority.SWEEP, "prune", self._prune)
        entry = self.registry.entry(prefix.fingerprint)
        if entry is None:
            self.metrics.record_chat(False)
            return WarmState.COLD
        self.registry.record_hit(entry.fingerprint, now)
        block_size = self.budget.block_size if self.budget is not None else None
        state = entry_warm_state(usage.cached_tokens, entry, block_size)
        count_lookup(self.metrics, state)
        if self.keeper is not None:
            self.keeper.observe_chat(entry.fingerprint, state is not WarmState.EVICTED)
        if state is WarmState.EVICTED:
            # vLLM evicted (part of) the prefix under memory pressure: warm it again.
            self.restorer.mark_evicted(entry.fingerprint)
            self.cycles.spawn(Priority.URGENT, CycleKind.EVICTED, self.restorer.rewarm_evicted)
        if record.fingerprint != entry.fingerprint:
            self.registry.assign(key, entry.fingerprint, self.context.bars(retrieval))
        self.metrics.record_chat(state is WarmState.HIT)
        return state

    def replica_down(self, replica: str) -> int:
        """The vLLM replica ``replica`` stopped answering: warm its entries again, hottest
        first (the router sends each to its next replica). Returns how many."""
        moved = [e.fingerprint for e in self.registry.entries() if e.replica == replica]
        for fingerprint in moved:
            self.restorer.mark_evicted(fingerprint, RewarmReason.FAILOVER)
        if moved:
            self.cycles.spawn(Priority.URGENT, CycleKind.FAILOVER, self.restorer.rewarm_evicted)
        return len(moved)

    def placements(self) -> list[tuple[str, str]]:
        """(fingerprint, replica) of every entry a replica holds: the router's memory
        after a restart of this process (the replicas kept their caches)."""
        return [(e.fingerprint, e.replica) for e in self.registry.entries() if e.replica]

    # ----- seed queries --------------------------------------------------------------

    async def add_seed_queries(self, texts: Sequence[str]) -> CycleReport:
        """Remember seed queries (they count as hot) and warm their prefixes now."""

        async def seed(report: CycleReport) -> None:
            keys = await self.hot.record_seeds(texts)
            await self.hot.warm(report, RewarmReason.SEED, only=keys)

        return await self.cycles.run(Priority.URGENT, CycleKind.SEED, seed)

    # ----- knowledge-base changes ----------------------------------------------------

    def notify_change(self, change: ChangeSet) -> None:
        """Queue a change; detection runs once the changes stop for ``debounce_s``."""
        self.changes.notify(change)

    def _changes_quiet(self) -> None:
        self.cycles.spawn(Priority.CHANGE, CycleKind.KB_CHANGE, self._flush)

    async def flush(self) -> CycleReport:
        """Run detection for every queued change now."""
        return await self.cycles.run(Priority.CHANGE, CycleKind.KB_CHANGE, self._flush)

    async def _catch_up(self, report: CycleReport) -> None:
        if self.settings.strategy.follows_kb:
            await self.changes.catch_up(report)

    async def _flush(self, report: CycleReport) -> None:
        if self.budget is not None:  # not started: the start-up flush takes them
            await self.changes.flush(report)

    async def recheck(self) -> CycleReport:
        """Scheduled detection: every entry's retrieval re-run; prefill what changed."""

        async def recheck(report: CycleReport) -> None:
            if self.settings.strategy.follows_kb:
                await self.changes.recheck(report)

        return await self.cycles.run(Priority.ROUTINE, CycleKind.RECHECK, recheck)

    # ----- periodic jobs -------------------------------------------------------------

    async def sweep(self) -> CycleReport:
        """Expired entries: keep (re-warm) the hot ones, retire the others."""
        return await self.cycles.run(Priority.SWEEP, CycleKind.SWEEP, self.sweeper.sweep)

    async def warm_hot(self) -> CycleReport:
        """Warm the contexts of hot (and seed) queries that have no warm entry yet;
        the synthetic strategies send their batch again too."""

        async def hot(report: CycleReport) -> None:
            if self.settings.strategy.uses_registry:
                await self.hot.warm(report, RewarmReason.HOT)
            if self.settings.strategy.sends_synthetic:
                await self.hot.send_synthetic(report)

        return await self.cycles.run(Priority.ROUTINE, CycleKind.HOT, hot)

    async def send_synthetic(self) -> CycleReport:
        """Send the batch of generic synthetic requests (prefill only, nothing registered)."""
        return await self.cycles.run(Priority.ROUTINE, CycleKind.SYNTHETIC, self.hot.send_synthetic)

    async def run_cycle(self) -> list[CycleReport]:
        """Everything at once (``POST /admin/warmup``): pending changes, TTLs, hot queries."""
        return [await self.flush(), await self.sweep(), await self.warm_hot()]

    # ----- jobs ----------------------------------------------------------------------

    async def _prune(self) -> None:
        self.sweeper.prune()

    # ----- helpers -------------------------------------------------------------------

    def _now(self) -> float:
        return self.clock()

    def _budget(self) -> WarmBudget:
        if self.budget is None:
            raise RuntimeError("warmup has not started (vLLM not reached yet)")
        return self.budget

    def _finished(self, report: CycleReport) -> None:
        """A job ended: count what it declined, and bring the gauges up to date."""
        self.metrics.count_declined(report.declined)
        self._update_gauges()

    def _update_gauges(self) -> None:
        self.metrics.set_registry(self.registry.entry_count(), self.registry.warm_tokens())
        if self.keeper is not None:
            self.keeper.update_gauges()

    async def aclose(self) -> None:
        """Stop: no more detection, the job running is cancelled, waiting jobs dropped,
        and what the registry changed is written to SQLite (for a few seconds at most)."""
        self.changes.stop()
        if self.keeper is not None:
            await self.keeper.aclose()
        await self.queue.aclose()
        await self.journal.aclose()

    def close(self) -> None:
        self.store.close()
