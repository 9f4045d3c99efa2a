"""Change handling: after knowledge-base changes, re-warm exactly what changed.

Changes are queued as they come and, once they stop for ``debounce_s``, detection
(``ChangeDetector``) finds the affected entries from stored data only. Each affected
entry's queries are retrieved afresh, hottest entry first: a changed context is
warmed and the old entry retired once no query points to it; an unchanged one is
extended. Unaffected entries are extended with no prefill.

A change is persisted from its notification until its detection is done, and at
start-up (``catch_up``) the changes a killed process left are replayed and every
entry is checked against the knowledge base, so no warm entry outlives the text it
was built from.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Sequence

import anyio

from rag.chat.change_rule import ChangeRule, ContextBars
from rag.chat.prompt import PromptPrefix
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.models import ChangeSet
from rag.knowledge.passages import text_hash
from warmup.context import ContextResolver
from warmup.detector import ChangeDetector
from warmup.heat import Heat
from warmup.hot import HotWarmup
from warmup.jobs import JobQueue
from warmup.metrics import WarmupMetrics
from warmup.models import RewarmReason
from warmup.predict import DocumentQuerySource, predicted_questions
from warmup.registry import Persist, Registry
from warmup.reports import CycleReport
from warmup.warmer import EntryWarmer


class ChangeHandler:
    def __init__(
        self,
        registry: Registry,
        heat: Heat,
        context: ContextResolver,
        warmer: EntryWarmer,
        hot: HotWarmup,
        queue: JobQueue,
        kb: KnowledgeBase,
        metrics: WarmupMetrics,
        *,
        rule: ChangeRule,
        follows_kb: bool,
        debounce_s: float,
        document_queries: bool,
        query_source: DocumentQuerySource = DocumentQuerySource.HEADINGS,
        on_quiet: Callable[[], None],
        persist: Persist,
        clock: Callable[[], float],
    ) -> None:
        """``on_quiet`` is called once the changes stop for ``debounce_s`` (it queues
        the detection job); ``persist`` takes the writes that keep pending changes in
        the store."""
        self.registry = registry
        self.heat = heat
        self.context = context
        self.warmer = warmer
        self.hot = hot
        self.queue = queue
        self.kb = kb
        self.metrics = metrics
        self.follows_kb = follows_kb
        self.debounce_s = debounce_s
        self.document_queries = document_queries
        self.query_source = query_source
        self.on_quiet = on_quiet
        self.persist = persist
        self.clock = clock
        self.detector = ChangeDetector(rule)
        self._pending: list[tuple[int, ChangeSet]] = []  # (sequence number, change)
        self._in_flight: list[tuple[int, ChangeSet]] = []  # detection running
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def load(self, pending: Sequence[tuple[int, ChangeSet]]) -> None:
        """The changes a stopped process left undetected (replayed by ``catch_up``)."""
        self._pending = sorted(pending, key=lambda item: item[0])
        self._seq = max((seq for seq, _ in self._pending), default=0)

    def unfinished(self) -> list[tuple[int, ChangeSet]]:
        """Every change whose detection is not done, for a rewrite of the store."""
        return [*self._in_flight, *self._pending]

    def notify(self, change: ChangeSet) -> None:
        """Queue a change; detection runs once the changes stop for ``debounce_s``.

        Strategies that do not follow the knowledge base drop it: their entries keep
        the passages they were warmed with until the TTL sweep."""
        if not change.changed:
            return
        if not self.follows_kb:
            return
        self._seq += 1
        seq = self._seq
        self._pending.append((seq, change))
        self.persist(lambda store: store.add_pending(seq, change))
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(self.debounce_s, self._quiet)

    def _quiet(self) -> None:
        self._timer = None
        self.on_quiet()

    async def flush(self, report: CycleReport) -> None:
        """Detection for every queued change, then the affected entries' refresh. The
        changes stay persisted until that is done (retried by the next flush if it
        fails)."""
        batch, self._pending = self._pending, []
        if not batch:
            return
        self._in_flight = batch
        try:
            await self._detect_and_refresh([change for _, change in batch], report)
        except BaseException:
            self._pending = batch + self._pending
            raise
        finally:
            self._in_flight = []
        done = batch[-1][0]
        self.persist(lambda store: store.drop_pending(done))

    async def _detect_and_refresh(self, changes: list[ChangeSet], report: CycleReport) -> None:
        report.kb_version = max(c.kb_version for c in changes)
        index = self.registry.entry_index()
        detection = self.detector.detect(index, self.registry.query_matrix(), changes)
        self.metrics.detection_seconds.observe(detection.seconds)
        report.detection_ms = round(detection.seconds * 1000, 3)
        report.entries_checked = len(index.chunk_ids)
        report.affected = len(detection.affected)
        # A chat that arrives before its context's re-warm misses: the contexts users
        # ask for most come back first.
        hottest = self.heat.hottest_first(detection.affected, self.clock())
        await self.refresh(hottest, RewarmReason.KB_CHANGE, report)
        self.warmer.extend(detection.unaffected, report)
        if self.document_queries and (keys := await self._seed_from_documents(changes)):
            await self.hot.warm(report, RewarmReason.PREDICTED, only=keys)

    async def catch_up(self, report: CycleReport) -> None:
        """Start-up, before anything is restored: replay the changes a stopped process
        left undetected, then retire every entry built from a chunk the knowledge base
        no longer holds, or holds with other text (a change whose notification was
        lost with the process)."""
        await self.flush(report)
        entries = self.registry.entries()
        doc_ids = sorted({d for e in entries for d in e.doc_ids})
        current = await anyio.to_thread.run_sync(self._chunk_hashes, doc_ids)
        for entry in entries:
            hashes = entry.content_hashes
            for i, chunk_id in enumerate(entry.chunk_ids):
                if chunk_id not in current or (i < len(hashes) and hashes[i] != current[chunk_id]):
                    self.warmer.retire(entry.fingerprint, report)
                    break

    def _chunk_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """Content hash of every current chunk of these documents."""
        return {
            chunk_id: text_hash(text)
            for doc_id in doc_ids
            for chunk_id, text in self.kb.chunk_texts(doc_id)
        }

    async def recheck(self, report: CycleReport) -> None:
        """Re-run every entry's retrieval from stored embeddings (also catches graph
        changes a change set cannot show); prefill only what changed."""
        fingerprints = self.registry.fingerprints()
        report.entries_checked = report.affected = len(fingerprints)
        await self.refresh(fingerprints, RewarmReason.KB_CHANGE, report)

    async def refresh(
        self, fingerprints: Sequence[str], reason: RewarmReason, report: CycleReport
    ) -> None:
        """Recompute the context of each entry's queries; warm new contexts, extend the
        unchanged ones, retire entries no query points to any more."""
        for fingerprint in fingerprints:
            await self.queue.checkpoint()
            entry = self.registry.entry(fingerprint)
            if entry is None:
                continue  # retired meanwhile
            groups: dict[str, list[tuple[str, ContextBars, PromptPrefix]]] = defaultdict(list)
            for key in entry.queries:
                found = await self.context.resolve(key, fresh=True)
                if found is not None:
                    bars = self.context.bars(found.retrieval)
                    groups[found.prefix.fingerprint].append((key, bars, found.prefix))
            for new_fp, members in sorted(groups.items()):
                if new_fp == fingerprint:
                    self.registry.rebase(fingerprint, members[0][2])
                    self.warmer.extend([fingerprint], report)
                elif new_fp not in self.registry:
                    await self.warmer.warm(members[0][2], reason, report)
                for key, bars, _ in members:
                    self.registry.assign(key, new_fp, bars)
            if fingerprint not in groups:
                self.warmer.retire(fingerprint, report)

    async def _seed_from_documents(self, changes: Sequence[ChangeSet]) -> set[str]:
        """The questions each new or updated document predicts (``warmup.predict``), as
        seed queries. Returns their keys."""
        doc_ids = sorted({d for c in changes for d in c.added + c.updated})
        texts = await anyio.to_thread.run_sync(self._predicted, doc_ids)
        if not texts:
            return set()
        # A guess, not a sighting: it ranks below any question users really asked.
        return await self.hot.record_seeds(texts, weight=0.0)

    def _predicted(self, doc_ids: Sequence[str]) -> list[str]:
        texts: list[str] = []
        for doc_id in doc_ids:
            texts += predicted_questions(self.kb.chunks(doc_id), self.query_source)
        return texts

    def stop(self) -> None:
        """No detection after this (shutting down)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
