"""A suite run's results as written to results.json and read back by the report: the
run's meta, then each section's results under its own key, given once it ran.

Everything here is pydantic and imports no model stack, so ``python -m bench.report``
rewrites a report from a saved results.json in a second. Fields with a default are the
ones a run may lack (a section not run, a record older runs did not keep; see
``bench.record``).
"""

from __future__ import annotations

from pydantic import Field

from bench.machine import Machine
from bench.real_records import RealResult
from bench.record import GrowingRecord, Record
from bench.scale_records import EmbeddedIndexResult, ScaleResult
from bench.scenario_records import (
    CorpusIngest,
    Floor,
    PressureResult,
    ScenarioConfig,
    Skipped,
    StrategyResult,
)
from bench.workload import WorkloadSpec


class SectionFailure(Record):
    """A section that raised. The run goes on with the next section (they do not depend on
    each other's results), and the command ends non-zero naming every failed one."""

    section: str
    error: str  # the exception's own line, e.g. "AssertionError: []"
    traceback: str


class RunMeta(GrowingRecord):
    """Where and how the run ran; the outcome fields are given at its end."""

    started: str | None = None
    quick: bool = False
    command: str | None = None
    argv: str | None = None
    machine: str | None = None
    machine_facts: Machine | None = None
    corpus: str | None = None
    commit: str | None = None
    workload: WorkloadSpec | None = None
    scenarios: ScenarioConfig | None = None
    interrupted: bool = False
    interrupted_in: str | None = None  # a section, "setup" or "clean-up"
    failed_sections: list[SectionFailure] = Field(default_factory=list)
    error: str | None = None  # runs from before sections were recorded one by one
    duration_s: float | None = None


class SuiteResults(GrowingRecord):
    """results.json, less the targets the report judges and adds."""

    meta: RunMeta
    strategies: dict[str, StrategyResult] = Field(default_factory=dict)
    scale: ScaleResult | None = None
    embedded_index: EmbeddedIndexResult | None = None
    floor: Floor | None = None
    corpus_ingest: CorpusIngest | None = None
    pressure: PressureResult | Skipped | None = None
    real: RealResult | None = None
