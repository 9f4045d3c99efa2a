"""Markdown table helpers and cell formats shared by the report's sections."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.scenario_records import StrategyResult


def row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [row(header), row(["---"] * len(header)), *(row(r) for r in rows), ""]


def ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0f}"


def pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0%}"


def na(value: object) -> str:
    return "-" if value is None else str(value)


def change_table(strategies: dict[str, StrategyResult]) -> list[str]:
    """Each strategy's knowledge-base changes: what detection found and re-warmed, and
    how the requests to the changed contexts fared in the window after."""
    rows = [
        [
            s.strategy,
            c.label,
            na(c.entries_affected_truth),
            na(c.entries_holding_changed_doc),
            na(c.entries_detected),
            na(c.entries_rewarmed),
            na(c.new_contexts_warm),
            na(c.rewarm_prefill_tokens),
            na(c.predicted_prefill_tokens),
            na(c.detection_ms),
            ms(c.summary.ttft_p50_ms),
            pct(c.summary.hit_share),
            pct(c.warm_before.hit_share if c.warm_before else math.nan),
            c.summary.n,
        ]
        for s in strategies.values()
        for c in s.change
    ]
    return table(
        [
            "strategy",
            "change",
            "entries whose context changed",
            "entries holding a changed doc",
            "detected",
            "re-warmed",
            "new contexts warm",
            "re-warm prefill tokens",
            "predicted-query prefill",
            "detection ms",
            "TTFT p50 ms",
            "warm hits",
            "hits where warm before",
            "requests",
        ],
        rows,
    )
