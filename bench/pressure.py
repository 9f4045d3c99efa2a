"""The pressure section: a vLLM whose KV cache is smaller than the contexts asked, with
cold traffic mixed in, where keeping the predicted set resident is the whole game.

Two scenarios on one vLLM:

1. the Zipf stream of the main runs over more towns than fit: strategy 1 (vLLM's LRU
   alone) against strategy 4 (warmrag's default);
2. the *hot set* under pressure: a known hot set (seeded questions about a few towns,
   within the warm budget) asked now and then among cold questions about the other
   towns, whose contexts alone are more than the cache holds between two asks of a
   hot one. Three runs side by side: vLLM's LRU alone (strategy 1, nothing seeded),
   warmup without residency (seeded; an evicted entry is re-warmed after a chat
   misses it) and warmup as shipped (residency from vLLM's KV events: re-warm on
   eviction, re-touch near the LRU tail).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

from bench.harness import engine_busy_s, reset_prefix_cache, service, vllm
from bench.paths import bench_dir
from bench.scenario_records import (
    HotSet,
    PressureResult,
    ScenarioConfig,
    Skipped,
    StrategyResult,
)
from bench.scenarios import build_template, run_strategy, run_stream
from bench.strategies import OURS, PLAIN, Overrides, Strategy
from bench.workload import Workload, WorkloadSpec
from rag.chat.query import normalize_query

PRESSURE_KV_GIB = 1
# The seed's tiers give no warm budget below 4 GiB; the pressure run sets the 4-16 GiB
# share explicitly so the planner has something to choose.
PRESSURE_BUDGET_SHARE = 0.3
PRESSURE_ZIPF_S = 0.9

Log = Callable[[str], None]
#: ``bench.suite.vllm_for``: the URL given, or a vLLM child started for the section.
VLLMFor = Callable[..., AbstractContextManager[str]]


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return round(statistics.quantiles(values, n=100, method="inclusive")[98], 1)


#: The hot set: questions about this many towns, seeded, asked with this probability
#: among cold questions about the other towns.
HOT_TOWNS = 12
HOT_SHARE = 0.2
#: Predicted questions stay off: the scenario measures keeping a known hot set
#: resident, and predictions for every town would warm the cold traffic too.
HOT_RUNS: dict[str, Overrides] = {
    "lru_alone": Overrides(warmup_enabled=False),
    "no_residency": Overrides(warmup_residency=False, warmup_document_queries=False),
    "residency": Overrides(warmup_document_queries=False),
}


def hot_stream(workload: Workload, length: int, seed: int = 5) -> tuple[list[str], list[str]]:
    """(hot questions, the stream): one question about each of ``HOT_TOWNS`` towns,
    and ``length`` requests, each hot with ``HOT_SHARE``, else the next cold question
    (about another town) in a shuffled round."""
    rng = random.Random(seed)
    towns = list(workload.question_towns)
    rng.shuffle(towns)
    hot = [t.questions()[0] for t in towns[:HOT_TOWNS]]
    cold = [q for t in towns[HOT_TOWNS:] for q in t.questions()]
    rng.shuffle(cold)
    stream, i = [], 0
    for _ in range(length):
        if rng.random() < HOT_SHARE:
            stream.append(rng.choice(hot))
        else:
            stream.append(cold[i % len(cold)])
            i += 1
    return hot, stream


def run_hot_set(
    url: str,
    work: Path,
    workload: Workload,
    length: int,
    log: Log,
    runs: dict[str, Overrides] = HOT_RUNS,
) -> dict[str, HotSet]:
    """The runs of the hot-set scenario, each on a copy of one ingested corpus, from an
    emptied cache (the first is the baseline of the TTFT ratio)."""
    template = work / "hot-template"
    build_template(url, template, workload, log)
    hot, stream = hot_stream(workload, length)
    hot_keys = {normalize_query(q) for q in hot}
    baseline_p99 = None
    out: dict[str, HotSet] = {}
    for name, settings in runs.items():
        data = work / f"hot-{name}"
        shutil.copytree(template, data)
        reset_prefix_cache(url)
        overrides: Overrides = {**settings, "warmup_budget_share": PRESSURE_BUDGET_SHARE}
        with service(url, data, **overrides) as svc:
            if settings.get("warmup_enabled", True):
                svc.seed(hot)
            before = engine_busy_s(url)
            records = run_stream(svc, stream)
            busy = engine_busy_s(url) - before
            retouch = svc.metric("warmrag_warmup_retouch_seconds_total")
            evicted = svc.metric('warmrag_rewarm_total{reason="kv_evicted"}')
        positions = [i for i, r in enumerate(records) if normalize_query(r.question) in hot_keys]
        picked = [records[i] for i in positions]
        hits = sum(r.hit for r in picked)
        all_p99 = p99([r.ttft_ms for r in records])
        baseline_p99 = baseline_p99 or all_p99
        out[name] = HotSet(
            n=len(picked),
            hits=hits,
            hit_share=round(hits / len(picked), 3) if picked else float("nan"),
            ttft_p99_ms=p99([r.ttft_ms for r in picked]),
            all_ttft_p99_ms=all_p99,
            all_ttft_p99_ratio=round(all_p99 / baseline_p99, 3),
            all_hit_share=round(sum(r.hit for r in records) / len(records), 3),
            retouch_s=round(retouch, 2),
            engine_busy_s=round(busy, 1),
            retouch_share=round(retouch / busy, 4) if busy else 0.0,
            evicted_rewarms=int(evicted),
            hot_states=dict(Counter(r.warm_state or "none" for r in picked)),
            hot_misses_at=[i for i in positions if not records[i].hit],
        )
        log(f"  hot set, {name}: {out[name].to_json()}")
    return out


def pressure_workload(spec: WorkloadSpec, quick: bool) -> Workload:
    """A flatter stream over more towns than the main runs, all of them asked about, so
    the contexts asked exceed the cache; only those towns are ingested."""
    towns = 45 if quick else 300
    return Workload(replace(spec, towns=towns, question_towns=towns, zipf_s=PRESSURE_ZIPF_S))


def run_pressure(
    args: argparse.Namespace,
    eager: bool,
    workload: Workload,
    config: ScenarioConfig,
    work: Path,
    vllm_for: VLLMFor,
    log: Log,
) -> PressureResult | Skipped:
    if args.vllm_url and not args.vllm_url_small:
        return Skipped(skipped="no --vllm-url-small")
    small = pressure_workload(workload.spec, args.quick)
    settings: Overrides = {**OURS.settings, "warmup_budget_share": PRESSURE_BUDGET_SHARE}
    ours = Strategy(OURS.number, OURS.name, settings)
    strategies: dict[str, StrategyResult] = {}
    with vllm_for(args.vllm_url_small, eager, kv_cache_gib=PRESSURE_KV_GIB) as url:
        for strategy in (PLAIN, ours):
            log(f"pressure: strategy {strategy.label}")
            strategies[strategy.slug] = run_strategy(
                strategy, url, work / "pressure", small, config, log, restart=False, change=False
            )
        log("pressure: the hot set among cold traffic")
        hot = run_hot_set(url, work / "pressure", small, 150 if args.quick else 300, log)
    steady = strategies[ours.slug].steady.after_stream
    return PressureResult(
        kv_cache_gib=PRESSURE_KV_GIB,
        budget_share=PRESSURE_BUDGET_SHARE,
        strategies=strategies,
        hot_set=hot,
        description=(
            f"vLLM with a {PRESSURE_KV_GIB} GiB KV cache ({steady.kv_capacity_tokens} tokens) "
            f"serving {len(small.questions)} questions about {len(small.towns)} towns (Zipf "
            f"s={PRESSURE_ZIPF_S}, {len(small.steady)} requests); strategy 4 "
            f"with a warm budget of {PRESSURE_BUDGET_SHARE:.0%} set explicitly (the seed's tiers "
            "give none below 4 GiB). Plain LRU (strategy 1) against warmrag's default. "
            f"Then the hot set: {HOT_TOWNS} seeded questions, each request hot with "
            f"probability {HOT_SHARE}, the others cold questions about the other towns; "
            "LRU alone, warmup without residency, and warmup with residency (KV events, "
            "re-warm on eviction, re-touch near the LRU tail)."
        ),
    )


def main(argv: list[str] | None = None) -> None:
    """The hot-set scenario alone: ``python -m bench.pressure [--quick]``."""
    parser = argparse.ArgumentParser(description="The hot set under KV-cache pressure.")
    parser.add_argument("--quick", action="store_true", help="45 towns, 150 requests")
    parser.add_argument("--runs", default=",".join(HOT_RUNS), help="which runs, in order")
    parser.add_argument("--retouch-at", type=float, default=None, help="for the warmup runs")
    args = parser.parse_args(argv)
    runs = {name: HOT_RUNS[name] for name in args.runs.split(",")}
    if args.retouch_at is not None:
        runs = {n: {**o, "warmup_retouch_at": args.retouch_at} for n, o in runs.items()}
    spec = WorkloadSpec.quick() if args.quick else WorkloadSpec.full()
    workload = pressure_workload(spec, args.quick)
    try:
        with (
            bench_dir("pressure-") as work,
            vllm(kv_cache_gib=PRESSURE_KV_GIB, enforce_eager=True) as url,
        ):
            hot = run_hot_set(url, work, workload, 150 if args.quick else 300, print, runs)
    except Exception as exc:  # a failed benchmark exits non-zero
        print(f"pressure failed: {exc!r}", file=sys.stderr)
        raise SystemExit(1) from exc
    print(json.dumps({k: v.to_json() for k, v in hot.items()}, indent=1))


if __name__ == "__main__":
    main()
