"""What ``bench.model_compare`` records: each answer with its scores, and the shares and
latencies per model and configuration (the module doc there defines each)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Literal

from bench.machine import Machine
from bench.record import Record

Kind = Literal["cold", "warm", "once"]


class Answer(Record):
    """One answer and its scores."""

    model: str
    config: str
    kind: Kind
    question: str
    gold: str
    answer: str
    finish_reason: str
    gold_fact: bool
    gold_runs: list[str]
    #: The runs of ``bench.answer_scores.LOOSE_RUN`` content words (the looser rule).
    loose_gold_runs: list[str] | None = None
    gold_in_prompt: bool
    cited: bool
    invalid_citations: bool
    gold_cited: bool
    repeats: bool
    echoes: bool
    answer_tokens: int
    tokens_per_s: float | None
    ttft_ms: float
    prompt_tokens: int
    cached_tokens: int


class Latency(Record):
    p50: float
    mean: float


class Summary(Record):
    """Shares of the answers (the warm re-asks of ``defaults`` are not counted twice)."""

    n: int
    gold_fact: float
    gold_in_prompt: float
    cited: float
    gold_cited: float
    repeats: float
    repeat_stopped: float
    hit_max_tokens: float
    echoes: float
    #: The same, of the answers that do not write the instruction back (an echo of the
    #: prompt carries its passages' [n] and text without answering).
    gold_fact_unechoed: float | None = None
    #: ``gold_fact`` by the looser rule (runs of three content words).
    loose_gold_fact: float | None = None
    loose_gold_fact_unechoed: float | None = None
    cited_unechoed: float | None = None
    answer_tokens_mean: float
    tokens_per_s: Latency | None
    cold_ttft_ms: Latency | None = None
    warm_ttft_ms: Latency | None = None
    floor_ttft_ms: Latency | None = None
    cold_cached_tokens_mean: float | None = None
    warm_cached_share: float | None = None


class CompareResult(Record):
    """What ``--out`` writes."""

    machine: Machine
    load_average: list[float]
    note: str
    corpus: str
    questions: int
    answer_tokens: int
    kv_cache_gib: int
    models: dict[str, str]
    configs: dict[str, dict[str, object]]
    missing_settings: list[str]
    summaries: dict[str, dict[str, Summary]]
    answers: list[Answer]


def latency(values: Sequence[float]) -> Latency | None:
    if not values:
        return None
    return Latency(p50=round(statistics.median(values), 1), mean=round(statistics.mean(values), 1))


def summarize(rows: list[Answer], floors: list[float]) -> Summary:
    scored = [r for r in rows if r.kind != "warm"]
    n = len(scored)

    def share(flag: Callable[[Answer], bool]) -> float:
        return round(sum(1 for r in scored if flag(r)) / n, 3) if n else 0.0

    cold = [r for r in rows if r.kind == "cold"]
    warm = [r for r in rows if r.kind == "warm"]
    timed = bool(cold)
    return Summary(
        n=n,
        gold_fact=share(lambda r: r.gold_fact),
        gold_in_prompt=share(lambda r: r.gold_in_prompt),
        cited=share(lambda r: r.cited),
        gold_cited=share(lambda r: r.gold_cited),
        repeats=share(lambda r: r.repeats),
        repeat_stopped=share(lambda r: r.finish_reason == "repeat"),
        hit_max_tokens=share(lambda r: r.finish_reason == "length"),
        echoes=share(lambda r: r.echoes),
        gold_fact_unechoed=share(lambda r: r.gold_fact and not r.echoes),
        loose_gold_fact=share(lambda r: bool(r.loose_gold_runs)),
        loose_gold_fact_unechoed=share(lambda r: bool(r.loose_gold_runs) and not r.echoes),
        cited_unechoed=share(lambda r: r.cited and not r.echoes),
        answer_tokens_mean=round(statistics.mean(r.answer_tokens for r in scored), 1) if n else 0,
        tokens_per_s=latency([r.tokens_per_s for r in scored if r.tokens_per_s is not None]),
        cold_ttft_ms=latency([r.ttft_ms for r in cold]) if timed else None,
        warm_ttft_ms=latency([r.ttft_ms for r in warm]) if timed else None,
        floor_ttft_ms=latency(floors) if timed else None,
        cold_cached_tokens_mean=round(statistics.mean(r.cached_tokens for r in cold), 1)
        if timed
        else None,
        warm_cached_share=round(
            sum(r.cached_tokens for r in warm) / max(1, sum(r.prompt_tokens for r in warm)), 3
        )
        if timed
        else None,
    )


def summaries_of(
    answers: list[Answer], configs: Sequence[str], floors: dict[str, list[float]]
) -> dict[str, dict[str, Summary]]:
    models = dict.fromkeys(a.model for a in answers)
    return {
        model: {
            name: summarize(
                [a for a in answers if a.model == model and a.config == name],
                floors.get(model, []) if name == "defaults" else [],
            )
            for name in configs
        }
        for model in models
    }
