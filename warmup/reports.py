"""What each warmup cycle did: one ``CycleReport`` per job, the recent ones kept.

``GET /admin/warmup/reports`` and the benchmark read these; ``CycleKind``'s values are
the JSON ``kind`` they match on, so they never change.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum

from pydantic import BaseModel, Field, PrivateAttr

from rag.llm import Usage
from warmup.models import RewarmReason

log = logging.getLogger(__name__)

REPORT_HISTORY = 200  # cycles that did something, kept for GET /admin/warmup/reports


class CycleKind(StrEnum):
    """Which job a report is from."""

    RESTORE = "restore"  # start-up: the hottest persisted entries, before /ready
    RESTORE_BACKGROUND = "restore_background"  # start-up: the rest of the budget, after
    EVICTED = "evicted"  # chats found a registered prefix evicted from vLLM's cache
    FAILOVER = "failover"  # a vLLM replica went down: its entries warmed on the next one
    SEED = "seed"  # seed queries an operator added
    KB_CHANGE = "kb_change"  # detection after knowledge-base changes, and its re-warms
    RECHECK = "recheck"  # the scheduled re-run of every entry's retrieval
    SWEEP = "sweep"  # expired entries: re-warmed when hot, retired when not
    HOT = "hot"  # hot queries without a warm entry (and the synthetic batch)
    SYNTHETIC = "synthetic"  # the synthetic strategies' batch at start-up


class CycleReport(BaseModel):
    """What one warmup operation did; every admin action and job returns one."""

    kind: CycleKind
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
    pruned: int = Field(0, description="Cold queries the sweep dropped from the query log.")
    detection_ms: float = 0.0
    total_ms: float = 0.0
    _perf_started: float = PrivateAttr(default_factory=time.perf_counter)

    def count_prefill(self, usage: Usage, reason: RewarmReason) -> int:
        """Count one prefill; returns the tokens vLLM computed for it."""
        tokens = usage.prompt_tokens - usage.cached_tokens
        self.rewarmed += 1
        self.warm_requests += 1
        self.prefill_tokens += tokens
        by_tokens, by_requests = self.prefill_tokens_by_reason, self.warm_requests_by_reason
        by_tokens[reason.value] = by_tokens.get(reason.value, 0) + tokens
        by_requests[reason.value] = by_requests.get(reason.value, 0) + 1
        return tokens

    @property
    def did_something(self) -> bool:
        return bool(self.warm_requests or self.retired or self.affected or self.extended)


class ReportLog:
    """Opens and closes reports, and keeps the last ``REPORT_HISTORY`` that did something
    (idle sweeps and hot cycles would push the informative ones out)."""

    def __init__(
        self,
        clock: Callable[[], float],
        kb_version: Callable[[], int],
        on_finish: Callable[[], None] = lambda: None,
    ) -> None:
        self._clock = clock
        self._kb_version = kb_version
        self._on_finish = on_finish
        self.recent: deque[CycleReport] = deque(maxlen=REPORT_HISTORY)
        self.last: CycleReport | None = None

    def begin(self, kind: CycleKind) -> CycleReport:
        return CycleReport(kind=kind, started_at=self._clock(), kb_version=self._kb_version())

    def finish(self, report: CycleReport) -> CycleReport:
        report.total_ms = round((time.perf_counter() - report._perf_started) * 1000, 2)
        self._on_finish()
        self.last = report
        if report.did_something:
            self.recent.append(report)
            log.info("warmup %s", report.model_dump())
        return report
