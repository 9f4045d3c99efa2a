"""What each warmup cycle did: one ``CycleReport`` per job, the recent ones kept.

``GET /admin/warmup/reports`` and the benchmark read these; ``CycleKind``'s values are
the JSON ``kind`` they match on, so they never change.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, Field, PrivateAttr, computed_field

from rag.llm.client import Usage
from warmup.models import DeclineReason, RewarmReason

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
    RETOUCH = "retouch"  # hot entries near the LRU tail re-touched (warmup.keeper)


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
    declined: dict[DeclineReason, int] = Field(
        default_factory=dict,
        description="Contexts this cycle did not warm, by reason (nothing is skipped silently).",
    )
    truncated: int = Field(
        0, description="Contexts longer than the per-entry share, warmed only that far."
    )
    truncated_tokens: int = Field(
        0, description="Prefix tokens those contexts left cold (past the per-entry share)."
    )
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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def skipped_over_budget(self) -> int:
        """Contexts over the warm budget (the ``over_budget`` and ``no_budget`` declines)."""
        return self.declined.get(DeclineReason.OVER_BUDGET, 0) + self.declined.get(
            DeclineReason.NO_BUDGET, 0
        )

    def decline(self, reason: DeclineReason, count: int = 1) -> None:
        """Count ``count`` contexts not warmed, for ``reason``."""
        if count > 0:
            self.declined[reason] = self.declined.get(reason, 0) + count

    def count_truncated(self, context_tokens: int, warmed_tokens: int) -> None:
        """A context warmed only as far as the per-entry share allows."""
        self.truncated += 1
        self.truncated_tokens += max(0, context_tokens - warmed_tokens)

    @property
    def did_something(self) -> bool:
        return bool(
            self.warm_requests or self.retired or self.affected or self.extended or self.declined
        )

    def summary(self) -> str:
        """One line on what this cycle did, for the log."""
        return (
            f"warmup {self.kind.value}: checked {self.entries_checked}, warmed "
            f"{self.rewarmed} ({self.prefill_tokens:,} prefill tokens), extended "
            f"{self.extended}, retired {self.retired} in {self.total_ms / 1000:.1f} s"
        )

    def shortfall(self) -> str | None:
        """One line on what this cycle declined or cut short (None: nothing)."""
        parts = []
        if self.declined:
            counts = ", ".join(f"{n} {reason.value}" for reason, n in sorted(self.declined.items()))
            parts.append(f"declined {counts}")
        if self.truncated:
            parts.append(
                f"{self.truncated} warmed only up to the per-entry share "
                f"({self.truncated_tokens} tokens left cold)"
            )
        return f"warmup {self.kind.value}: " + "; ".join(parts) if parts else None


@dataclass
class Shortfall:
    """What the cycles since start declined, by reason, and cut to the per-entry share."""

    declined: dict[DeclineReason, int] = field(default_factory=dict)
    truncated: int = 0

    def add(self, report: CycleReport) -> None:
        for reason, count in report.declined.items():
            self.declined[reason] = self.declined.get(reason, 0) + count
        self.truncated += report.truncated


class ReportLog:
    """Opens and closes reports, and keeps the last ``REPORT_HISTORY`` that did something
    (idle sweeps and hot cycles would push the informative ones out)."""

    def __init__(
        self,
        clock: Callable[[], float],
        kb_version: Callable[[], int],
        on_finish: Callable[[CycleReport], None] = lambda report: None,
    ) -> None:
        self._clock = clock
        self._kb_version = kb_version
        self._on_finish = on_finish
        self.recent: deque[CycleReport] = deque(maxlen=REPORT_HISTORY)
        self.last: CycleReport | None = None
        self.totals = Shortfall()

    def begin(self, kind: CycleKind) -> CycleReport:
        return CycleReport(kind=kind, started_at=self._clock(), kb_version=self._kb_version())

    def finish(self, report: CycleReport) -> CycleReport:
        report.total_ms = round((time.perf_counter() - report._perf_started) * 1000, 2)
        self.totals.add(report)
        self._on_finish(report)
        self.last = report
        if report.did_something:
            self.recent.append(report)
            # One readable line; a JSON log also carries the whole report as an object.
            log.info("%s", report.summary(), extra={"warmup": report.model_dump(mode="json")})
        if (shortfall := report.shortfall()) is not None:
            log.warning("%s", shortfall)
        return report
