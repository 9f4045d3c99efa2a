"""Hot warmup: warm the contexts of hot (and seed) queries that have no warm entry yet.

Candidates are the hot queries' contexts, grouped by prefix; ``WarmupPlanner`` picks
them within the budget, most valuable first, in progressive steps (displacing colder
entries when the budget is full). The synthetic strategies' batch of generic
questions is sent from here too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from rag.chat.change_rule import ContextBars
from rag.chat.prompt import PromptPrefix
from rag.chat.query import normalize_query
from warmup.budget import WarmBudget
from warmup.context import ContextResolver
from warmup.heat import Heat
from warmup.jobs import JobQueue
from warmup.models import DeclineReason, RewarmReason
from warmup.planner import Candidate, Incumbent, WarmupPlanner, prefix_tokens
from warmup.registry import Registry
from warmup.reports import CycleReport
from warmup.warmer import EntryWarmer


class HotWarmup:
    def __init__(
        self,
        registry: Registry,
        heat: Heat,
        context: ContextResolver,
        warmer: EntryWarmer,
        planner: WarmupPlanner,
        queue: JobQueue,
        *,
        budget: Callable[[], WarmBudget],
        synthetic_queries: Sequence[str],
        clock: Callable[[], float],
    ) -> None:
        self.registry = registry
        self.heat = heat
        self.context = context
        self.warmer = warmer
        self.planner = planner
        self.queue = queue
        self.budget = budget
        self.synthetic_queries = tuple(synthetic_queries)
        self.clock = clock

    async def record_seeds(self, texts: Sequence[str], weight: float = 1.0) -> set[str]:
        """Remember seed queries (they count as hot); returns their keys. ``weight`` 0:
        a guess, not a sighting (a question predicted from a document)."""
        embeddings = await self.context.embed(texts)
        now = self.clock()
        for text, embedding in zip(texts, embeddings, strict=True):
            self.registry.record_query(
                normalize_query(text),
                text,
                embedding,
                now,
                self.heat.half_life_s,
                seed=True,
                weight=weight,
            )
        return {normalize_query(t) for t in texts}

    async def warm(
        self, report: CycleReport, reason: RewarmReason, only: set[str] | None = None
    ) -> None:
        """Plan and warm the hot queries' contexts (``only``: just these keys').

        Yields to more urgent jobs between retrievals and between prefills. A change's
        detection may run in such a pause: a candidate planned before a change is
        warmed only for the queries that still retrieve it."""
        generation = self.context.generation
        candidates = await self._candidates(only)
        budget = self.budget()
        if not budget.enabled:
            report.decline(DeclineReason.NO_BUDGET, len(candidates))
            return
        plan = self.planner.plan(
            candidates, budget, self.registry.warm_tokens(), self._incumbents(self.clock())
        )
        report.decline(DeclineReason.OVER_BUDGET, plan.skipped_over_budget)
        report.decline(DeclineReason.NO_FULL_BLOCK, plan.skipped_no_full_block)
        done = 0
        for step in plan.steps:
            for candidate in step:
                await self.queue.checkpoint()
                members = list(zip(candidate.keys, candidate.bars, strict=True))
                if self.context.generation != generation:
                    members = await self._still_current(candidate.prefix, members)
                    if not members:
                        continue
                fingerprint = candidate.prefix.fingerprint
                if fingerprint not in self.registry:
                    # Its victims make room just before it is warmed (vLLM's LRU reclaims
                    # their blocks); a cycle cut short retires nothing it did not replace.
                    for victim in plan.displaces.get(fingerprint, ()):
                        self.warmer.retire(victim, report)
                    if await self.warmer.warm(candidate.prefix, reason, report) is None:
                        continue
                for key, bars in members:
                    self.registry.assign(key, fingerprint, bars)
            done += len(step)
            if await self.warmer.kv_full():
                report.stopped_by_kv_usage = True
                report.decline(DeclineReason.KV_FULL, len(plan.candidates) - done)
                break

    async def _still_current(
        self, prefix: PromptPrefix, members: list[tuple[str, ContextBars]]
    ) -> list[tuple[str, ContextBars]]:
        """The members whose query retrieves ``prefix`` now (the knowledge base moved)."""
        current = []
        for key, _ in members:
            found = await self.context.resolve(key)
            if found is not None and found.prefix.fingerprint == prefix.fingerprint:
                current.append((key, self.context.bars(found.retrieval)))
        return current

    async def _candidates(self, only: set[str] | None) -> list[Candidate]:
        """The hot queries without a warm entry, grouped by the prefix they retrieve."""
        now = self.clock()
        budget = self.budget()
        # With the budget (nearly) full, a query no hotter than the coldest warm entry
        # cannot displace anything: skip it (after a change the memo is empty, and
        # thousands of predicted questions would be re-retrieved next to the chats).
        full = budget.max_tokens - self.registry.warm_tokens() < budget.per_entry_max_tokens
        incumbents = self._incumbents(now) if full else []
        coldest = min((i.heat for i in incumbents), default=0.0) if full else -1.0
        groups: dict[str, list[tuple[str, ContextBars, float]]] = defaultdict(list)
        prefixes: dict[str, PromptPrefix] = {}
        for query in self.registry.queries():
            if query.fingerprint is not None or (only is not None and query.key not in only):
                continue
            heat = self.heat.of_query(query, now)
            if not self.heat.is_hot(heat) or heat <= coldest:
                continue
            await self.queue.checkpoint()
            found = await self.context.resolve(query.key)
            if found is None:
                continue
            bars = self.context.bars(found.retrieval)
            if found.prefix.fingerprint in self.registry:
                self.registry.assign(query.key, found.prefix.fingerprint, bars)
                continue
            prefixes[found.prefix.fingerprint] = found.prefix
            groups[found.prefix.fingerprint].append((query.key, bars, heat))
        return [
            Candidate(
                prefix=prefixes[fp],
                keys=tuple(k for k, _, _ in members),
                bars=tuple(b for _, b, _ in members),
                frequency=sum(h for _, _, h in members),
                est_tokens=prefix_tokens(prefixes[fp]),
            )
            for fp, members in groups.items()
        ]

    def _incumbents(self, now: float) -> list[Incumbent]:
        return [
            Incumbent(e.fingerprint, self.heat.of_entry(e.fingerprint, now), e.prefix_tokens)
            for e in self.registry.entries()
        ]

    async def send_synthetic(self, report: CycleReport) -> None:
        """Send the batch of generic questions' prefixes (prefill only, nothing registered)."""
        if not self.budget().enabled:
            report.decline(DeclineReason.NO_BUDGET, len(self.synthetic_queries))
            return
        for text in self.synthetic_queries:
            await self.queue.checkpoint()
            prefix = await self.context.prefix_for(text)
            await self.warmer.send(prefix, RewarmReason.SYNTHETIC, report)
