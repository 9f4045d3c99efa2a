"""What the scenarios write for one strategy (``bench.scenarios``), and the main section's
floor, corpus ingest and pressure runs: the results.json the report reads back.

Fields with a default are the ones older results.json files lack (they read back as
"not recorded") or that only some strategies have; see ``bench.record``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from bench.measure import ChangeRequest, RequestRecord, Summary
from bench.record import GrowingRecord, Record


@dataclass(frozen=True)
class ScenarioConfig:
    """The change scenario's sizes and window, and the floor's sample (``bench.scenarios``)."""

    change_sizes: tuple[int, ...] = (1, 10, 100)
    change_window_s: float = 60.0
    change_requests: int = 60  # at most this many requests per change window
    floor_questions: int = 40

    @classmethod
    def quick(cls) -> ScenarioConfig:
        return cls(change_sizes=(1, 5), change_window_s=8.0, change_requests=6, floor_questions=15)


class WarmupState(Record):
    """Prefill spent on warmup so far, the registry's size, and vLLM's KV usage."""

    warm_prefill_tokens: int
    warm_requests: int
    kv_usage: float
    warm_entries: int
    warm_tokens: int
    kv_capacity_tokens: int | None
    budget_tokens: int | None = None  # given where the strategy runs a warmup layer
    retouch_s: float | None = None  # re-touch request time (soft pinning), where it runs


class Cycle(Record):
    """A warmup cycle that did something, ``at_s`` from the scenario's origin."""

    #: What it did, as the service's report counts it (``warmup.reports.CycleReport``).
    COUNTS: ClassVar[set[str]] = {
        "affected",
        "rewarmed",
        "retired",
        "extended",
        "warm_requests",
        "total_ms",
    }

    at_s: float
    kind: str
    affected: int
    rewarmed: int
    retired: int
    extended: int
    warm_requests: int
    total_ms: float


class SteadyResult(Record):
    """The steady stream, from a reset prefix cache after the ingest and the warmup."""

    ingest_s: float
    chunks: int
    prepare_s: float
    before_stream: WarmupState
    after_stream: WarmupState
    summary: Summary
    first_sight: Summary
    cycles: list[Cycle] = Field(default_factory=list)
    requests: list[RequestRecord]


class RestartResult(Record):
    """The requests after a restart on the same data folder, with an emptied cache."""

    ready_s: float
    summary: Summary
    misses: dict[str, int] | None = None  # by reason (``scenarios.miss_reasons``)
    cycles: list[Cycle] = Field(default_factory=list)
    requests: list[RequestRecord]
    state: WarmupState


class ChangeResult(Record):
    """One knowledge-base change (k documents; k = 0: an unrelated one) and the window of
    requests to the changed contexts after it. The counts from the cycle's report are
    None where the strategy runs no warmup layer."""

    k: int
    label: str
    documents: int
    ingest_ms: float
    #: Entries whose queries now retrieve a different context (retrieved afresh after the
    #: change, independently of the detector), and how many new contexts the cycle warmed.
    entries_affected_truth: int | None
    new_contexts: int
    new_contexts_warm: int | None = None
    entries_holding_changed_doc: int | None = None
    entries_detected: int | None
    entries_rewarmed: int | None
    predicted_warm_requests: int | None
    detection_ms: float | None
    rewarm_prefill_tokens: int | None
    predicted_prefill_tokens: int | None
    cycle_prefill_tokens: int | None
    warm_prefill_tokens_total: int
    summary: Summary
    warm_before: Summary | None = None  # the requests whose context was warm before
    #: Every cycle from the registry's snapshot to the window's end (times from the
    #: ingest's start; a hot job can fall in between).
    cycles: list[Cycle] = Field(default_factory=list)
    requests: list[ChangeRequest]


class StrategyResult(GrowingRecord):
    """One strategy's scenarios, each given once it ran."""

    strategy: str
    number: int
    steady: SteadyResult
    restart: RestartResult | None = None
    change: list[ChangeResult] = Field(default_factory=list)

    @property
    def changes(self) -> list[ChangeResult]:
        """The changes of k >= 1 documents (not the unrelated one)."""
        return [c for c in self.change if c.k]

    def change_records(self, warm_before: bool = False) -> list[ChangeRequest]:
        """Requests to changed contexts (``warm_before``: only those warm before it)."""
        return [r for c in self.changes for r in c.requests if not warm_before or r.warm_before]


class Floor(Record):
    """TTFT of the questions alone, straight to vLLM: no retrieval, no context."""

    n: int
    ttft_ms: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.ttft_ms) if self.ttft_ms else math.nan


class CorpusIngest(Record):
    """The corpus ingested once over HTTP into the folder the strategies copy."""

    documents: int
    chunks: int
    seconds: float
    chunks_per_s: float


class Skipped(Record):
    """A section that did not run, and why."""

    skipped: str


class HotSet(Record):
    """One run of the hot-set scenario (``bench.pressure``): how the requests to the
    hot set fared, and what keeping it cost."""

    n: int  # requests to the hot set
    hits: int
    hit_share: float
    ttft_p99_ms: float  # of the hot requests
    all_ttft_p99_ms: float  # of every request
    all_ttft_p99_ratio: float  # against LRU alone's
    all_hit_share: float
    #: Engine time re-touches took, and all of vLLM's request time in the stream.
    retouch_s: float = 0.0
    engine_busy_s: float = 0.0
    retouch_share: float = 0.0
    evicted_rewarms: int = 0  # re-warms queued by an eviction event
    #: The hot requests by how warmup saw them (hit, partial, evicted, cold) and, for
    #: each miss, its position in the stream.
    hot_states: dict[str, int] = Field(default_factory=dict)
    hot_misses_at: list[int] = Field(default_factory=list)


class PressureResult(Record):
    """Strategies 1 and 4 on a vLLM whose KV cache is smaller than the working set."""

    kv_cache_gib: int
    budget_share: float
    strategies: dict[str, StrategyResult]
    description: str
    hot_set: dict[str, HotSet] = Field(default_factory=dict)
