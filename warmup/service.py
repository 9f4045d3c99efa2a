"""The warmup layer's coordinator.

It watches every chat (hot queries, hits, evictions), reacts to knowledge-base
changes (debounced detection, re-warm what changed, extend the rest), runs the
periodic jobs the scheduler calls, and warms the registry back up at start-up.
All registry mutations run under one asyncio lock, so jobs never interleave.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio
from pydantic import BaseModel, Field

from rag.llm import LLMEngine, Usage
from rag.metrics import ServiceMetrics
from rag.models import ChangeSet
from rag.prompt import PromptBuilder, PromptPrefix
from rag.retriever import Retrieval, Retriever
from warmup.budget import WarmBudget
from warmup.detector import ChangeDetector
from warmup.keys import normalize_query
from warmup.models import (
    SYNTHETIC_QUERIES,
    QueryRecord,
    RewarmReason,
    WarmEntry,
    WarmupStrategy,
)
from warmup.planner import Candidate, Incumbent, WarmupPlanner, estimate_tokens
from warmup.retrieval_memo import RetrievalMemo, Retrieved
from warmup.store import WarmupStore, decayed
from warmup.warmer import Warmer

log = logging.getLogger(__name__)

REPORT_HISTORY = 200  # cycles that did something, kept for GET /admin/warmup/reports


class WarmupConfig(BaseModel):
    strategy: WarmupStrategy = Field(WarmupStrategy.KNOWLEDGE_AWARE, description="What to warm.")
    synthetic_queries: tuple[str, ...] = Field(
        SYNTHETIC_QUERIES, description="The batch the synthetic and hybrid strategies send."
    )
    ttl_s: float = Field(1800.0, gt=0, description="How long a warm entry lives unless extended.")
    half_life_s: float = Field(3600.0, gt=0, description="Half-life of hot-query counts.")
    hot_min_count: float = Field(0.5, gt=0, description="Decayed count that makes a query hot.")
    steps: int = Field(3, ge=1, description="Progressive warmup steps.")
    kv_usage_threshold: float = Field(0.7, gt=0, le=1, description="Stop warming above this.")
    max_concurrency: int = Field(1, ge=1)
    debounce_s: float = Field(1.0, ge=0)
    restore_max_entries: int = Field(64, ge=0)
    budget_share: float | None = Field(None, ge=0, le=1, description="Override the memory tier.")
    document_queries: bool = Field(False, description="Warm a query derived from new documents.")
    top_k: int = 3
    context_window: int = 4096


class CycleReport(BaseModel):
    """What one warmup operation did; every admin action and job returns one."""

    kind: str
    started_at: float = Field(0.0, description="When it began (seconds since the epoch).")
    kb_version: int | None = None
    entries_checked: int = 0
    affected: int = 0
    rewarmed: int = 0
    extended: int = 0
    retired: int = 0
    warm_requests: int = 0
    prefill_tokens: int = 0
    prefill_tokens_by_reason: dict[str, int] = Field(default_factory=dict)
    warm_requests_by_reason: dict[str, int] = Field(default_factory=dict)
    stopped_by_kv_usage: bool = False
    skipped_over_budget: int = 0
    detection_ms: float = 0.0
    total_ms: float = 0.0


class WarmupService:
    def __init__(
        self,
        config: WarmupConfig,
        store: WarmupStore,
        retriever: Retriever,
        builder: PromptBuilder,
        llm: LLMEngine,
        warmer: Warmer,
        metrics: ServiceMetrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.retriever = retriever
        self.builder = builder
        self.llm = llm
        self.warmer = warmer
        self.metrics = metrics
        self.clock = clock
        self.detector = ChangeDetector()
        self.planner = WarmupPlanner(config.steps)
        self.retrievals = RetrievalMemo()
        self.budget: WarmBudget | None = None
        self.reports: deque[CycleReport] = deque(maxlen=REPORT_HISTORY)
        self.last_report: CycleReport | None = None
        self._lock = asyncio.Lock()
        self._pending: list[ChangeSet] = []
        self._debounce: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._evicted: set[str] = set()
        self._started_at = 0.0

    # ----- start-up ------------------------------------------------------------------

    async def start(self) -> CycleReport:
        """Start-up warmup: read the budget from vLLM, re-warm the hottest entries."""
        cache = await self.llm.cache_config()
        self.budget = WarmBudget.from_cache(
            cache, self.config.context_window, self.config.budget_share
        )
        self.metrics.cold_starts.inc()
        log.info(
            "warm budget: %d of %d KV tokens (share %.0f%%), strategy %s",
            self.budget.max_tokens,
            self.budget.capacity_tokens,
            self.budget.share * 100,
            self.config.strategy.value,
        )
        report = await self.restore()
        if self.config.strategy.sends_synthetic:
            await self.send_synthetic()
        return report

    async def restore(self) -> CycleReport:
        """Prefill persisted entries, hottest first, within budget; retire the rest
        (after a restart vLLM holds none of them).

        The hottest ``restore_max_entries`` are warmed now (start-up waits for them);
        the others that fit the budget follow in the background, behind chats."""
        async with self._lock:
            report = self._begin("restore")
            now = self._started_at = self.clock()
            entries = sorted(self.store.entries(), key=lambda e: -self._heat(e, now))
            room = self._budget().max_tokens
            keep: list[WarmEntry] = []
            for entry in entries:
                if entry.prefix_tokens <= room:
                    keep.append(entry)
                    room -= entry.prefix_tokens
                else:
                    self.store.retire(entry.fingerprint)
                    report.retired += 1
            now_list, later = (
                keep[: self.config.restore_max_entries],
                keep[self.config.restore_max_entries :],
            )
            if not await self._prefill_steps(now_list, RewarmReason.STARTUP, report):
                later = []
            if later:
                self._spawn(self._restore_later([e.fingerprint for e in later]))
            return self._finish(report)

    async def _restore_later(self, fingerprints: Sequence[str]) -> CycleReport:
        """One entry per turn of the lock: change detection and the jobs, which may be
        more urgent, get in between."""
        report = self._begin("restore_background")
        for fingerprint in fingerprints:
            async with self._lock:
                entry = self.store.entry(fingerprint)
                if entry is None or entry.warmed_at > self._started_at:
                    continue  # retired, or warmed again meanwhile
                await self._prefill_entry(entry, RewarmReason.STARTUP, report)
                if await self._kv_full():
                    report.stopped_by_kv_usage = True
                    break
        return self._finish(report)

    async def _prefill_steps(
        self, entries: list[WarmEntry], reason: RewarmReason, report: CycleReport
    ) -> bool:
        """Prefill in progressive steps; past the KV-usage threshold, retire the rest and
        return False."""
        for step in _steps(entries, self.config.steps):
            for entry in step:
                await self._prefill_entry(entry, reason, report)
            if await self._kv_full():
                report.stopped_by_kv_usage = True
                for rest in entries[entries.index(step[-1]) + 1 :]:
                    self.store.retire(rest.fingerprint)
                    report.retired += 1
                return False
        return True

    # ----- chats -------------------------------------------------------------------

    def on_chat(self, retrieval: Retrieval, prefix: PromptPrefix, usage: Usage) -> bool:
        """Log the question; return whether it hit a registered warm prefix."""
        if not self.config.strategy.uses_registry:
            self.metrics.record_chat(False)
            return False
        now = self.clock()
        key = normalize_query(retrieval.question)
        record = self.store.record_query(
            key, retrieval.question, retrieval.embedding, now, self.config.half_life_s
        )
        entry = self.store.entry(prefix.fingerprint)
        if entry is None:
            self.metrics.record_chat(False)
            return False
        self.store.record_hit(entry.fingerprint, now)
        self.metrics.warmup_lookups.inc()
        hit = entry.cached_block_tokens > 0 and usage.cached_tokens >= entry.cached_block_tokens
        if hit:
            self.metrics.warmup_hits.inc()
        else:
            # vLLM evicted (part of) the prefix under memory pressure: warm it again.
            self.metrics.kv_cache_misses.inc()
            self._evicted.add(entry.fingerprint)
            self._spawn(self.rewarm_evicted())
        if record.fingerprint != entry.fingerprint:
            self.store.assign(key, entry.fingerprint, _kth(retrieval))
        self.metrics.record_chat(hit)
        return hit

    async def rewarm_evicted(self) -> CycleReport:
        async with self._lock:
            report = self._begin("evicted")
            for fingerprint in sorted(self._evicted):
                entry = self.store.entry(fingerprint)
                if entry is not None:
                    await self._prefill_entry(entry, RewarmReason.EVICTED, report)
            self._evicted.clear()
            return self._finish(report)

    # ----- seed queries ------------------------------------------------------------

    async def add_seed_queries(self, texts: Sequence[str]) -> CycleReport:
        """Remember seed queries (they count as hot) and warm their prefixes now."""
        async with self._lock:
            report = self._begin("seed")
            await self._record_seeds(texts)
            await self._warm_hot(
                report, RewarmReason.SEED, only={normalize_query(t) for t in texts}
            )
            return self._finish(report)

    async def _record_seeds(self, texts: Sequence[str], weight: float = 1.0) -> None:
        embeddings = await anyio.to_thread.run_sync(self.retriever.embed_questions, list(texts))
        now = self.clock()
        for text, embedding in zip(texts, embeddings, strict=True):
            self.store.record_query(
                normalize_query(text),
                text,
                embedding,
                now,
                self.config.half_life_s,
                seed=True,
                weight=weight,
            )

    # ----- knowledge-base changes --------------------------------------------------

    def notify_change(self, change: ChangeSet) -> None:
        """Queue a change; detection runs once the changes stop for ``debounce_s``.

        Strategies that do not follow the knowledge base drop it: their entries keep
        the passages they were warmed with until the TTL sweep."""
        if not change.changed:
            return
        self.retrievals.invalidate()  # any context may have moved, followed or not
        if not self.config.strategy.follows_kb:
            return
        self._pending.append(change)
        if self._debounce is not None:
            self._debounce.cancel()
        self._debounce = asyncio.get_running_loop().create_task(self._debounced())

    async def _debounced(self) -> None:
        await asyncio.sleep(self.config.debounce_s)
        self._spawn(self.flush())

    @property
    def pending_changes(self) -> int:
        return len(self._pending)

    async def flush(self) -> CycleReport:
        """Run detection for every queued change now."""
        async with self._lock:
            report = self._begin("kb_change")
            if self.budget is None:  # not started: the start-up flush will take them
                return self._finish(report)
            changes, self._pending = self._pending, []
            if not changes:
                return self._finish(report)
            report.kb_version = max(c.kb_version for c in changes)
            started = time.perf_counter()
            index = self.store.entry_index()
            detection = self.detector.detect(index, self.store.query_matrix(), changes)
            seconds = time.perf_counter() - started
            self.metrics.detection_seconds.observe(seconds)
            report.detection_ms = round(seconds * 1000, 3)
            report.entries_checked = len(index.chunk_ids)
            report.affected = len(detection.affected)
            await self._refresh(
                self._hottest_first(detection.affected), RewarmReason.KB_CHANGE, report
            )
            report.extended += self._extend(detection.unaffected)
            if self.config.document_queries and (keys := await self._seed_from_documents(changes)):
                await self._warm_hot(report, RewarmReason.SEED, only=keys)
            return self._finish(report)

    async def recheck(self) -> CycleReport:
        """Scheduled detection: re-run every entry's retrieval from stored embeddings
        (also catches graph changes a change set cannot show); prefill only what changed."""
        async with self._lock:
            report = self._begin("recheck")
            if not self.config.strategy.follows_kb:
                return self._finish(report)
            entries = self.store.entries()
            report.entries_checked = report.affected = len(entries)
            await self._refresh([e.fingerprint for e in entries], RewarmReason.KB_CHANGE, report)
            return self._finish(report)

    async def _refresh(
        self, fingerprints: Sequence[str], reason: RewarmReason, report: CycleReport
    ) -> None:
        """Recompute the context of each entry's queries; warm new contexts, extend the
        unchanged ones, retire entries no query points to any more."""
        for fingerprint in fingerprints:
            entry = self.store.entry(fingerprint)
            if entry is None:
                continue
            groups: dict[str, list[tuple[str, float | None, PromptPrefix]]] = defaultdict(list)
            for key in entry.queries:
                found = await self._retrieve_stored(key, fresh=True)
                if found is not None:
                    prefix, kth = found
                    groups[prefix.fingerprint].append((key, kth, prefix))
            for new_fp, members in sorted(groups.items()):
                if new_fp == fingerprint:
                    report.extended += self._extend([fingerprint])
                    for key, kth, _ in members:
                        self.store.assign(key, fingerprint, kth)
                    continue
                if self.store.entry(new_fp) is None:
                    await self._warm(members[0][2], reason, report)
                for key, kth, _ in members:
                    self.store.assign(key, new_fp, kth)
            if fingerprint not in groups:
                self.store.retire(fingerprint)
                report.retired += 1

    async def _seed_from_documents(self, changes: Sequence[ChangeSet]) -> set[str]:
        """A question each new document predicts: its first sentence, as a seed query.
        Returns their keys."""
        texts = []
        for doc_id in sorted({d for c in changes for d in c.added + c.updated}):
            chunks = self.retriever.kb.chunk_texts(doc_id)
            if chunks and (sentence := _first_sentence(chunks[0][1])):
                texts.append(sentence)
        if texts:
            # A guess, not a sighting: it ranks below any question users really asked.
            await self._record_seeds(texts, weight=0.0)
        return {normalize_query(t) for t in texts}

    # ----- periodic jobs -----------------------------------------------------------

    async def sweep(self) -> CycleReport:
        """Expired entries: keep (re-warm) the hot ones, retire the others."""
        async with self._lock:
            report = self._begin("sweep")
            now = self.clock()
            for entry in self.store.entries():
                if entry.expires_at > now:
                    continue
                report.entries_checked += 1
                if self._heat(entry, now) >= self.config.hot_min_count:
                    await self._prefill_entry(entry, RewarmReason.EXPIRED_HOT, report)
                else:
                    self.store.retire(entry.fingerprint)
                    report.retired += 1
            return self._finish(report)

    async def warm_hot(self) -> CycleReport:
        """Warm the contexts of hot (and seed) queries that have no warm entry yet;
        the synthetic strategies send their batch again too."""
        async with self._lock:
            report = self._begin("hot")
            if self.config.strategy.uses_registry:
                await self._warm_hot(report, RewarmReason.HOT)
            if self.config.strategy.sends_synthetic:
                await self._send_synthetic(report)
            return self._finish(report)

    async def send_synthetic(self) -> CycleReport:
        """Send the batch of generic synthetic requests (prefill only, nothing registered)."""
        async with self._lock:
            report = self._begin("synthetic")
            await self._send_synthetic(report)
            return self._finish(report)

    async def _send_synthetic(self, report: CycleReport) -> None:
        if not self._budget().enabled:
            report.skipped_over_budget += len(self.config.synthetic_queries)
            return
        for text in self.config.synthetic_queries:
            retrieval = await anyio.to_thread.run_sync(
                self.retriever.retrieve, text, self.config.top_k
            )
            prefix = self.builder.prefix(retrieval.passages, retrieval.triples)
            self._count_prefill(await self.warmer.warm(prefix), RewarmReason.SYNTHETIC, report)

    async def _warm_hot(
        self, report: CycleReport, reason: RewarmReason, only: set[str] | None = None
    ) -> None:
        """Plan and warm the hot queries' contexts (``only``: just these keys')."""
        now = self.clock()
        groups: dict[str, list[tuple[str, float | None, float]]] = defaultdict(list)
        prefixes: dict[str, PromptPrefix] = {}
        # One read of the registry, not one per logged query: this runs on the event loop.
        registered = set(self.store.entry_index().chunk_ids)
        budget = self._budget()
        incumbents = [
            Incumbent(e.fingerprint, self._heat(e, now), e.prefix_tokens)
            for e in self.store.entries()
        ]
        # With the budget (nearly) full, a query no hotter than the coldest warm entry
        # cannot displace anything: skip it (after a change the memo is empty, and
        # thousands of predicted questions would be re-retrieved next to the chats).
        full = budget.max_tokens - self.store.warm_tokens() < budget.per_entry_max_tokens
        coldest = min((i.heat for i in incumbents), default=0.0) if full else -1.0
        for query in self.store.queries():
            if query.fingerprint in registered or (only is not None and query.key not in only):
                continue
            heat = self._query_heat(query, now)
            if heat < self.config.hot_min_count or heat <= coldest:
                continue
            found = await self._retrieve_stored(query.key)
            if found is None:
                continue
            prefix, kth = found
            if prefix.fingerprint in registered:
                self.store.assign(query.key, prefix.fingerprint, kth)
                continue
            prefixes[prefix.fingerprint] = prefix
            groups[prefix.fingerprint].append((query.key, kth, heat))
        candidates = [
            Candidate(
                prefix=prefixes[fp],
                keys=tuple(k for k, _, _ in members),
                kth_scores=tuple(s if s is not None else -1.0 for _, s, _ in members),
                frequency=sum(h for _, _, h in members),
                est_tokens=estimate_tokens(prefixes[fp]),
            )
            for fp, members in groups.items()
        ]
        plan = self.planner.plan(candidates, budget, self.store.warm_tokens(), incumbents)
        report.skipped_over_budget += plan.skipped_over_budget
        for step in plan.steps:
            for candidate in step:
                # Its victims make room just before it is warmed (vLLM's LRU reclaims
                # their blocks); with chats going on, a cycle can take minutes.
                for fingerprint in plan.displaces.get(candidate.prefix.fingerprint, ()):
                    self.store.retire(fingerprint)
                    report.retired += 1
                entry = await self._warm(candidate.prefix, reason, report)
                if entry is not None:
                    for key, kth in zip(candidate.keys, candidate.kth_scores, strict=True):
                        self.store.assign(key, entry.fingerprint, kth)
            if await self._kv_full():
                report.stopped_by_kv_usage = True
                break

    async def run_cycle(self) -> list[CycleReport]:
        """Everything at once (``POST /admin/warmup``): pending changes, TTLs, hot queries."""
        return [await self.flush(), await self.sweep(), await self.warm_hot()]

    # ----- helpers -----------------------------------------------------------------

    def _budget(self) -> WarmBudget:
        if self.budget is None:
            raise RuntimeError("warmup has not started (vLLM not reached yet)")
        return self.budget

    async def _retrieve_stored(
        self, key: str, *, fresh: bool = False
    ) -> tuple[PromptPrefix, float | None] | None:
        """The prefix a chat for ``key`` would send now, from its stored embedding.

        Remembered until the knowledge base changes; ``fresh`` retrieves anyway
        (detection and the scheduled re-check must see the stores as they are)."""
        if not fresh and (memo := self.retrievals.get(key)) is not None:
            return memo.prefix, memo.kth_score
        record = self.store.query(key)
        embedding = self.store.query_embedding(key)
        if record is None or embedding is None:
            return None
        generation = self.retrievals.generation
        retrieval = await anyio.to_thread.run_sync(
            self.retriever.retrieve, record.text, self.config.top_k, embedding
        )
        found = Retrieved(
            self.builder.prefix(retrieval.passages, retrieval.triples), _kth(retrieval)
        )
        self.retrievals.put(key, generation, found)
        return found.prefix, found.kth_score

    async def _warm(
        self, prefix: PromptPrefix, reason: RewarmReason, report: CycleReport
    ) -> WarmEntry | None:
        budget = self._budget()
        if not budget.enabled:
            report.skipped_over_budget += 1
            return None
        usage = await self.warmer.warm(prefix)
        now = self.clock()
        entry = WarmEntry(
            fingerprint=prefix.fingerprint,
            messages=[dict(m) for m in prefix.messages],
            chunk_ids=[p.chunk_id for p in prefix.passages],
            doc_ids=sorted({p.doc_id for p in prefix.passages}),
            content_hashes=[p.content_hash for p in prefix.passages],
            triples=[list(t) for t in prefix.triples],
            prefix_tokens=usage.prompt_tokens,
            cached_block_tokens=budget.full_blocks(usage.prompt_tokens),
            warmed_at=now,
            expires_at=now + self.config.ttl_s,
        )
        self.store.put_entry(entry)
        self._count_prefill(usage, reason, report)
        return entry

    async def _prefill_entry(
        self, entry: WarmEntry, reason: RewarmReason, report: CycleReport
    ) -> None:
        """Prefill a registered entry's exact messages again and renew its TTL."""
        prefix = PromptPrefix(
            messages=tuple(entry.messages), passages=(), triples=(), fingerprint=entry.fingerprint
        )
        usage = await self.warmer.warm(prefix)
        now = self.clock()
        self.store.put_entry(
            entry.model_copy(update={"warmed_at": now, "expires_at": now + self.config.ttl_s})
        )
        self._count_prefill(usage, reason, report)

    def _count_prefill(self, usage: Usage, reason: RewarmReason, report: CycleReport) -> None:
        report.rewarmed += 1
        report.warm_requests += 1
        tokens = usage.prompt_tokens - usage.cached_tokens
        report.prefill_tokens += tokens
        tokens_by, requests_by = report.prefill_tokens_by_reason, report.warm_requests_by_reason
        tokens_by[reason.value] = tokens_by.get(reason.value, 0) + tokens
        requests_by[reason.value] = requests_by.get(reason.value, 0) + 1
        self.metrics.rewarms.labels(reason.value).inc()

    def _extend(self, fingerprints: Sequence[str] | set[str]) -> int:
        if not fingerprints:
            return 0
        count = self.store.extend(fingerprints, self.clock() + self.config.ttl_s)
        self.metrics.ttl_extensions.inc(count)
        return count

    def _hottest_first(self, fingerprints: set[str]) -> list[str]:
        """Re-warm order after a change: the contexts users ask for most come back
        first, since a chat that arrives before its context's re-warm misses."""
        now = self.clock()
        heat = {
            fp: self._heat(entry, now) if (entry := self.store.entry(fp)) else 0.0
            for fp in fingerprints
        }
        return sorted(fingerprints, key=lambda fp: (-heat[fp], fp))

    def _heat(self, entry: WarmEntry, now: float) -> float:
        queries = (self.store.query(key) for key in entry.queries)
        return sum(self._query_heat(q, now) for q in queries if q is not None)

    def _query_heat(self, query: QueryRecord, now: float) -> float:
        """Decayed sightings, plus the hot threshold for a seed (so a seed stays hot)."""
        seed = self.config.hot_min_count if query.seed else 0.0
        return seed + decayed(query.count, query.last_seen, now, self.config.half_life_s)

    async def _kv_full(self) -> bool:
        return await self.llm.kv_usage() > self.config.kv_usage_threshold

    def _begin(self, kind: str) -> CycleReport:
        report = CycleReport(
            kind=kind, started_at=self.clock(), kb_version=self.retriever.kb.version
        )
        report.total_ms = time.perf_counter()
        return report

    def _finish(self, report: CycleReport) -> CycleReport:
        report.total_ms = round((time.perf_counter() - report.total_ms) * 1000, 2)
        self.metrics.warm_entries.set(self.store.entry_count())
        self.metrics.warm_tokens.set(self.store.warm_tokens())
        self.last_report = report
        if report.warm_requests or report.retired or report.affected or report.extended:
            # Idle sweeps and hot cycles would push the informative ones out.
            self.reports.append(report)
            log.info("warmup %s", report.model_dump())
        return report

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("background warmup failed: %r", exc)

    async def aclose(self) -> None:
        if self._debounce is not None:
            self._debounce.cancel()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down
                await task


def _kth(retrieval: Retrieval) -> float | None:
    return retrieval.passages[-1].score if retrieval.passages else None


def _steps(items: list[WarmEntry], steps: int) -> list[list[WarmEntry]]:
    size = -(-len(items) // steps) if items else 0
    return [items[i : i + size] for i in range(0, len(items), size)] if size else []


def _first_sentence(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    prose = " ".join(lines)
    end = prose.find(". ")
    return (prose[: end + 1] if end > 0 else prose)[:300]
