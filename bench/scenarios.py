"""The scenarios one strategy goes through, in order, on its own data folder:

1. steady: from a reset prefix cache, ingest the corpus, let the strategy warm (as its
   scheduled job would), then serve the steady stream; requests whose question is new
   in the run are the "first sight" subset;
2. restart: the service stops, vLLM's cache is emptied (as a restarted vLLM's is), the
   service starts on the same folder and serves the next requests after ``/ready``;
3. change: ingest one unrelated document, then k changed documents (k = 1, 10, 100);
   after each, detection runs at once while requests to the changed contexts arrive
   over a window (``bench.change_scenario``).

``pressure`` runs the steady scenario alone on a vLLM whose KV cache is smaller than
the working set.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.change_scenario import cycles_since, run_change
from bench.harness import Service, floor_ttft, kv_usage, reset_prefix_cache, service
from bench.measure import RequestRecord, summarize
from bench.scenario_records import (
    CorpusIngest,
    Floor,
    RestartResult,
    ScenarioConfig,
    SteadyResult,
    StrategyResult,
    WarmupState,
)
from bench.strategies import Strategy
from bench.workload import AnyWorkload
from rag.chat.query import normalize_query

Log = Callable[[str], None]


def run_stream(
    svc: Service, stream: list[str], seen: set[str] | None = None
) -> list[RequestRecord]:
    """Serve the requests one after another; ``seen`` (updated) marks first sights."""
    records = []
    started = time.perf_counter()
    for question in stream:
        key = normalize_query(question)
        first = seen is not None and key not in seen
        if seen is not None:
            seen.add(key)
        t_s = time.perf_counter() - started
        records.append(RequestRecord.of_chat(question, t_s, svc.chat(question), first))
    return records


def warmup_state(svc: Service, strategy: Strategy, vllm_url: str) -> WarmupState:
    """Prefill spent on warmup so far, the registry's size, and vLLM's KV usage."""
    prefill = int(svc.metric("warmrag_warm_prefill_tokens_total"))
    requests = int(svc.metric("warmrag_warm_requests_total"))
    usage = round(kv_usage(vllm_url), 4)
    if not strategy.warms:
        return WarmupState(
            warm_prefill_tokens=prefill,
            warm_requests=requests,
            kv_usage=usage,
            warm_entries=0,
            warm_tokens=0,
            kv_capacity_tokens=None,
        )
    registry = svc.registry()
    assert registry.budget is not None, "a warmup layer without a budget"
    return WarmupState(
        warm_prefill_tokens=prefill,
        warm_requests=requests,
        kv_usage=usage,
        warm_entries=len(registry.entries),
        warm_tokens=registry.warm_tokens,
        kv_capacity_tokens=registry.budget.capacity_tokens,
        budget_tokens=registry.budget.max_tokens,
        retouch_s=svc.metric("warmrag_warmup_retouch_seconds_total"),
    )


def build_template(vllm_url: str, folder: Path, workload: AnyWorkload, log: Log) -> CorpusIngest:
    """Ingest the corpus once over HTTP (documents, chunks, knowledge graph) into a data
    folder the strategies copy; returns the end-to-end ingest numbers."""
    docs = workload.documents()
    with service(vllm_url, folder, warmup_enabled=False) as svc:
        started = time.perf_counter()
        svc.ingest(docs)
        seconds = time.perf_counter() - started
        chunks = svc.server.runtime.kb.count_chunks()
    log(f"ingested {len(docs)} documents ({chunks} chunks) in {seconds:.0f} s")
    return CorpusIngest(
        documents=len(docs),
        chunks=chunks,
        seconds=round(seconds, 1),
        chunks_per_s=round(chunks / seconds, 1),
    )


def measure_floor(vllm_url: str, workload: AnyWorkload, config: ScenarioConfig) -> Floor:
    """TTFT of the stream's questions with no context at all, straight to vLLM."""
    questions = sorted({normalize_query(q): q for q in workload.steady}.values())
    sample = random.Random(3).sample(questions, min(config.floor_questions, len(questions)))
    ttft = [floor_ttft(vllm_url, q) for q in sample]
    return Floor(n=len(ttft), ttft_ms=[round(t, 2) for t in ttft])


def run_strategy(
    strategy: Strategy,
    vllm_url: str,
    work: Path,
    workload: AnyWorkload,
    config: ScenarioConfig,
    log: Log,
    *,
    template: Path | None = None,
    restart: bool = True,
    change: bool = True,
) -> StrategyResult:
    data = work / strategy.slug
    seen: set[str] = set()
    # Strategies that predict from new documents ingest the corpus themselves; the
    # others start from a copy of an ingested knowledge base (the same bytes).
    copied = template is not None and not strategy.predicts
    if copied:
        assert template is not None
        shutil.copytree(template, data)
    reset_prefix_cache(vllm_url)
    with service(vllm_url, data, **strategy.settings) as svc:
        steady = run_steady(svc, strategy, vllm_url, workload, seen, copied, log)
        if strategy.warms:
            svc.warm_cycle()  # the hot job, before the restart
    result = StrategyResult(strategy=strategy.label, number=strategy.number, steady=steady)
    if not restart:
        return result

    reset_prefix_cache(vllm_url)
    started, started_at = time.perf_counter(), time.time()
    with service(vllm_url, data, **strategy.settings) as svc:
        ready_s = time.perf_counter() - started
        asked_before = set(seen)
        registered = registered_keys(svc) if strategy.warms else None
        after = run_stream(svc, workload.restart, seen)
        result.restart = RestartResult(
            ready_s=round(ready_s, 2),
            summary=summarize(after),
            misses=miss_reasons(after, asked_before, registered),
            cycles=cycles_since(svc, started_at) if strategy.warms else [],
            requests=after,
            state=warmup_state(svc, strategy, vllm_url),
        )
        log(f"  {strategy.label}: restart (ready {ready_s:.1f} s) {result.restart.summary.line()}")
        if change and strategy.runs_change:
            result.change = [
                run_change(svc, strategy, workload, config, k, log)
                for k in (0, *config.change_sizes)
            ]
    return result


def run_steady(
    svc: Service,
    strategy: Strategy,
    vllm_url: str,
    workload: AnyWorkload,
    seen: set[str],
    copied: bool,
    log: Log,
) -> SteadyResult:
    """Ingest (unless the data folder is a copied template), warm as the strategy's
    scheduled jobs would, then serve the steady stream."""
    docs = workload.documents()
    started = time.perf_counter()
    if not copied:
        svc.ingest(docs)
    ingest_s = time.perf_counter() - started
    started = time.perf_counter()
    if strategy.warms:
        svc.warm_cycle()  # what its scheduled jobs would do
    prepare_s = time.perf_counter() - started
    how = "copied" if copied else "ingested"
    log(f"  {strategy.label}: {how} {len(docs)} docs in {ingest_s:.0f} s, warmup {prepare_s:.0f} s")
    before = warmup_state(svc, strategy, vllm_url)
    stream_at = time.time()
    steady = run_stream(svc, workload.steady, seen)
    result = SteadyResult(
        ingest_s=round(ingest_s, 2),
        chunks=svc.server.runtime.kb.count_chunks(),
        prepare_s=round(prepare_s, 2),
        before_stream=before,
        after_stream=warmup_state(svc, strategy, vllm_url),
        summary=summarize(steady),
        first_sight=summarize([r for r in steady if r.first_sight]),
        cycles=cycles_since(svc, stream_at) if strategy.warms else [],
        requests=steady,
    )
    log(f"  {strategy.label}: steady {result.summary.line()}")
    return result


def registered_keys(svc: Service) -> set[str]:
    """The query keys that point to a warm entry (what a restart can restore)."""
    return {key for e in svc.registry().entries for key in e.queries}


def miss_reasons(
    records: list[RequestRecord], asked_before: set[str], registered: set[str] | None
) -> dict[str, int]:
    """Why each request after a restart missed: its question was never asked before,
    or was asked but had no warm entry, or had one whose prefix was not warm (yet).
    ``registered`` is None for a strategy without a registry."""
    reasons: Counter[str] = Counter()
    for record in records:
        if record.hit:
            continue
        key = normalize_query(record.question)
        if key not in asked_before:
            reasons["never asked before"] += 1
        elif registered is None:
            reasons["asked before, cache emptied"] += 1
        elif key not in registered:
            reasons["asked before, no warm entry"] += 1
        else:
            reasons["warm entry, prefix not (yet) warm"] += 1
    return dict(reasons)
