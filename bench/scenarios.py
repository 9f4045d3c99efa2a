"""The scenarios one strategy goes through, in order, on its own data folder:

1. steady: from a reset prefix cache, ingest the corpus, let the strategy warm (as its
   scheduled job would), then serve the steady stream; requests whose question is new
   in the run are the "first sight" subset;
2. restart: the service stops, vLLM's cache is emptied (as a restarted vLLM's is), the
   service starts on the same folder and serves the next requests after ``/ready``;
3. change: ingest one unrelated document, then k changed documents (k = 1, 10, 100);
   after each, detection runs at once (``POST /admin/warmup``, in the background, as
   the debounce would) while requests to the changed contexts arrive over a window.

``pressure`` runs the steady scenario alone on a vLLM whose KV cache is smaller than
the working set.
"""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import Service, floor_ttft, kv_usage, reset_prefix_cache, service
from bench.measure import RequestRecord, summarize
from bench.strategies import Strategy
from bench.workload import AnyWorkload, Topic, unrelated_document
from rag.chat.query import normalize_query

Log = Callable[[str], None]


@dataclass(frozen=True)
class ScenarioConfig:
    change_sizes: tuple[int, ...] = (1, 10, 100)
    change_window_s: float = 60.0
    change_requests: int = 60  # at most this many requests per change window
    floor_questions: int = 40

    @classmethod
    def quick(cls) -> ScenarioConfig:
        return cls(change_sizes=(1, 5), change_window_s=8.0, change_requests=6, floor_questions=15)


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
        records.append(RequestRecord.from_chat(question, t_s, svc.chat(question), first))
    return records


def warmup_state(svc: Service, strategy: Strategy, vllm_url: str) -> dict[str, Any]:
    """Prefill spent on warmup so far, the registry's size, and vLLM's KV usage."""
    state: dict[str, Any] = {
        "warm_prefill_tokens": int(svc.metric("warmrag_warm_prefill_tokens_total")),
        "warm_requests": int(svc.metric("warmrag_warm_requests_total")),
        "kv_usage": round(kv_usage(vllm_url), 4),
        "warm_entries": 0,
        "warm_tokens": 0,
        "kv_capacity_tokens": None,
    }
    if strategy.warms:
        registry = svc.get("/admin/warmup")
        state["warm_entries"] = len(registry["entries"])
        state["warm_tokens"] = registry["warm_tokens"]
        state["kv_capacity_tokens"] = registry["budget"]["capacity_tokens"]
        state["budget_tokens"] = registry["budget"]["max_tokens"]
    return state


def build_template(vllm_url: str, folder: Path, workload: AnyWorkload, log: Log) -> dict[str, Any]:
    """Ingest the corpus once over HTTP (documents, chunks, knowledge graph) into a data
    folder the strategies copy; returns the end-to-end ingest numbers."""
    docs = workload.documents()
    with service(vllm_url, folder, warmup_enabled=False) as svc:
        started = time.perf_counter()
        svc.ingest(docs)
        seconds = time.perf_counter() - started
        chunks = svc.server.runtime.kb.count_chunks()
    log(f"ingested {len(docs)} documents ({chunks} chunks) in {seconds:.0f} s")
    return {
        "documents": len(docs),
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(chunks / seconds, 1),
    }


def measure_floor(vllm_url: str, workload: AnyWorkload, config: ScenarioConfig) -> dict[str, Any]:
    """TTFT of the stream's questions with no context at all, straight to vLLM."""
    questions = sorted({normalize_query(q): q for q in workload.steady}.values())
    sample = random.Random(3).sample(questions, min(config.floor_questions, len(questions)))
    ttft = [floor_ttft(vllm_url, q) for q in sample]
    return {"n": len(ttft), "ttft_ms": [round(t, 2) for t in ttft]}


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
) -> dict[str, Any]:
    data = work / strategy.slug
    result: dict[str, Any] = {"strategy": strategy.label, "number": strategy.number}
    seen: set[str] = set()

    # Strategies that predict from new documents ingest the corpus themselves; the
    # others start from a copy of an ingested knowledge base (the same bytes).
    predicts = bool(strategy.settings.get("warmup_document_queries"))
    if template is not None and not predicts:
        shutil.copytree(template, data)
    reset_prefix_cache(vllm_url)
    with service(vllm_url, data, **strategy.settings) as svc:
        docs = workload.documents()
        started = time.perf_counter()
        if template is None or predicts:
            svc.ingest(docs)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        if strategy.warms:
            svc.post("/admin/warmup", None, admin=True)  # what its scheduled jobs would do
        prepare_s = time.perf_counter() - started
        how = "ingested" if template is None or predicts else "copied"
        log(
            f"  {strategy.label}: {how} {len(docs)} docs in {ingest_s:.0f} s, "
            f"warmup {prepare_s:.0f} s"
        )
        before = warmup_state(svc, strategy, vllm_url)
        stream_at = time.time()
        steady = run_stream(svc, workload.steady, seen)
        result["steady"] = {
            "ingest_s": round(ingest_s, 2),
            "chunks": svc.server.runtime.kb.count_chunks(),
            "prepare_s": round(prepare_s, 2),
            "before_stream": before,
            "after_stream": warmup_state(svc, strategy, vllm_url),
            "summary": summarize(steady),
            "first_sight": summarize([r for r in steady if r.first_sight]),
            "cycles": cycles_since(svc, stream_at) if strategy.warms else [],
            "requests": [r.to_json() for r in steady],
        }
        log(f"  {strategy.label}: steady {fmt(result['steady']['summary'])}")
        if strategy.warms:
            svc.post("/admin/warmup", None, admin=True)  # the hot job, before the restart
    if not restart:
        return result

    reset_prefix_cache(vllm_url)
    started, started_at = time.perf_counter(), time.time()
    with service(vllm_url, data, **strategy.settings) as svc:
        ready_s = time.perf_counter() - started
        asked_before = set(seen)
        registered = registered_keys(svc) if strategy.warms else None
        after = run_stream(svc, workload.restart, seen)
        result["restart"] = {
            "ready_s": round(ready_s, 2),
            "summary": summarize(after),
            "misses": miss_reasons(after, asked_before, registered),
            "cycles": cycles_since(svc, started_at) if strategy.warms else [],
            "requests": [r.to_json() for r in after],
            "state": warmup_state(svc, strategy, vllm_url),
        }
        summary = result["restart"]["summary"]
        log(f"  {strategy.label}: restart (ready {ready_s:.1f} s) {fmt(summary)}")
        if change and strategy.runs_change:
            result["change"] = [
                run_change(svc, strategy, vllm_url, workload, config, k, log)
                for k in (0, *config.change_sizes)
            ]
    return result


def changed_towns(workload: AnyWorkload, sizes: tuple[int, ...]) -> dict[int, list[Topic]]:
    """Disjoint sets of the most requested towns: k = 1 gets the most popular one."""
    ranked = workload.towns_by_traffic()
    plan, offset = {}, 0
    for k in sizes:
        chosen = list(ranked[offset : offset + k])
        if len(chosen) < k:  # a small workload: reuse popular towns for the larger change
            chosen = list(ranked[:k])
        plan[k] = chosen
        offset += k
    return plan


def run_change(
    svc: Service,
    strategy: Strategy,
    vllm_url: str,
    workload: AnyWorkload,
    config: ScenarioConfig,
    k: int,
    log: Log,
) -> dict[str, Any]:
    """Ingest k changed documents (k = 0: one unrelated document) and ask the changed
    contexts' questions, each once, spread over the window that follows."""
    towns = changed_towns(workload, config.change_sizes)[k] if k else []
    revision = 1 + sorted(config.change_sizes).index(k) if k else 0
    docs = [t.documents(revision)[0] for t in towns] if k else [unrelated_document()]
    changed_ids = {str(d["id"]) for d in docs}
    holding = None
    entries: dict[str, list[str]] = {}
    questions = affected_questions(svc, workload, towns, changed_ids)[: config.change_requests]
    # A context that was never warm has nothing to re-warm: such requests are counted
    # apart, so the re-warm's hit share is not diluted (nor flattered) by them.
    warm_before: set[str] = set()
    snapshot_at = time.time()
    if strategy.warms:
        entries = entry_queries(svc)
        registry = svc.get("/admin/warmup")["entries"]
        holding = sum(1 for e in registry if changed_ids & set(e["doc_ids"]))
        warm_before = {q for q in questions if context_of(svc, q) in entries}
    prefill_before = svc.metric("warmrag_warm_prefill_tokens_total")

    started, ingest_at = time.perf_counter(), time.time()
    svc.ingest(docs)
    ingest_ms = (time.perf_counter() - started) * 1000
    cycle: dict[str, Any] = {}
    detect = threading.Thread(target=lambda: cycle.update(reports=_cycle(svc)), daemon=True)
    if strategy.warms:
        detect.start()

    spacing = config.change_window_s / max(1, len(questions))
    window_start = time.perf_counter()
    records = []
    for i, question in enumerate(questions):
        delay = window_start + i * spacing + 0.5 - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t_s = time.perf_counter() - started
        records.append(RequestRecord.from_chat(question, t_s, svc.chat(question)))
    if strategy.warms:
        detect.join()
    truth = changed_contexts(svc, entries) if strategy.warms else None
    report: dict[str, Any] = next(
        (r for r in cycle.get("reports", []) if r["kind"] == "kb_change"), {}
    )
    by_reason = report.get("prefill_tokens_by_reason", {})
    summary = summarize(records)
    result: dict[str, Any] = {
        "k": k,
        "label": f"{k} changed" if k else "unrelated",
        "documents": len(docs),
        "ingest_ms": round(ingest_ms, 1),
        # Entries whose queries now retrieve a different context (retrieved afresh after
        # the change, independently of the detector), and how many of those new
        # contexts the cycle left warm.
        "entries_affected_truth": len(truth) if truth is not None else None,
        "new_contexts": len({c for new in (truth or {}).values() for c in new}),
        "new_contexts_warm": warm_contexts(svc, truth) if truth is not None else None,
        "entries_holding_changed_doc": holding,
        "entries_detected": report.get("affected"),
        "entries_rewarmed": report.get("warm_requests_by_reason", {}).get("kb_change", 0)
        if report
        else None,
        "predicted_warm_requests": report.get("warm_requests_by_reason", {}).get("seed", 0)
        if report
        else None,
        "detection_ms": report.get("detection_ms"),
        "rewarm_prefill_tokens": by_reason.get("kb_change", 0) if report else None,
        "predicted_prefill_tokens": by_reason.get("seed", 0) if report else None,
        "cycle_prefill_tokens": report.get("prefill_tokens"),
        "warm_prefill_tokens_total": int(
            svc.metric("warmrag_warm_prefill_tokens_total") - prefill_before
        ),
        "summary": summary,
        "warm_before": summarize([r for r in records if r.question in warm_before]),
        # Every cycle from the snapshot of the registry to the window's end (times from
        # the ingest's start; a hot job can fall in between).
        "cycles": cycles_since(svc, snapshot_at, ingest_at) if strategy.warms else [],
        "requests": [{**r.to_json(), "warm_before": r.question in warm_before} for r in records],
    }
    log(
        f"  {strategy.label}: {result['label']}: detected {result['entries_detected']} of "
        f"{result['entries_affected_truth']} changed, re-warmed "
        f"{result['entries_rewarmed']} ({result['rewarm_prefill_tokens']} tokens); "
        + (fmt(summary) if records else "no requests")
    )
    return result


def affected_questions(
    svc: Service, workload: AnyWorkload, towns: list[Topic], changed_ids: set[str]
) -> list[str]:
    """Per changed town, the most asked of its questions whose context (top-k, before the
    change) holds a changed document: the contexts the change really affects."""
    retriever = svc.server.runtime.retriever
    chosen = []
    for town in towns:
        ranked = sorted(town.questions(), key=lambda q: q != workload.asked_question(town))
        for question in ranked:
            if changed_ids & {p.doc_id for p in retriever.retrieve(question).passages}:
                chosen.append(question)
                break
    return chosen


def registered_keys(svc: Service) -> set[str]:
    """The query keys that point to a warm entry (what a restart can restore)."""
    return {key for e in svc.get("/admin/warmup")["entries"] for key in e["queries"]}


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


def entry_queries(svc: Service) -> dict[str, list[str]]:
    """Each warm entry's fingerprint with the texts of the queries pointing to it."""
    warmup = svc.server.runtime.warmup
    assert warmup is not None
    records = (
        (e.fingerprint, warmup.registry.query(k))
        for e in warmup.registry.entries()
        for k in e.queries
    )
    entries: dict[str, list[str]] = defaultdict(list)
    for fingerprint, record in records:
        if record is not None:
            entries[fingerprint].append(record.text)
    return dict(entries)


def changed_contexts(svc: Service, entries: dict[str, list[str]]) -> dict[str, set[str]]:
    """The entries whose queries a chat would now send with another prefix, each with
    those new prefixes: retrieved afresh from the query texts, as a chat does."""
    changed = {}
    for fingerprint, texts in entries.items():
        now = {context_of(svc, text) for text in texts}
        if now != {fingerprint}:
            changed[fingerprint] = now - {fingerprint}
    return changed


def context_of(svc: Service, question: str) -> str:
    """The fingerprint of the prefix a chat for ``question`` would send now."""
    runtime = svc.server.runtime
    found = runtime.retriever.retrieve(question)
    return runtime.builder.prefix(found.passages, found.triples).fingerprint


def warm_contexts(svc: Service, changed: dict[str, set[str]]) -> int:
    """How many of the changed entries' new prefixes are warm entries now."""
    registered = {e["fingerprint"] for e in svc.get("/admin/warmup")["entries"]}
    return len({c for new in changed.values() for c in new} & registered)


def cycles_since(svc: Service, since: float, origin: float | None = None) -> list[dict[str, Any]]:
    """The service's cycles begun since ``since`` (epoch s) that did something, with
    ``at_s`` counted from ``origin`` (default ``since``)."""
    origin = since if origin is None else origin
    resp = svc.client.get("/admin/warmup/reports", params={"since": since}, headers=svc.admin)
    resp.raise_for_status()
    fields = ("kind", "affected", "rewarmed", "retired", "extended", "warm_requests", "total_ms")
    return [
        {"at_s": round(r["started_at"] - origin, 2), **{f: r[f] for f in fields}}
        for r in resp.json()
    ]


def _cycle(svc: Service) -> list[dict[str, Any]]:
    return list(svc.post("/admin/warmup", None, admin=True))


def fmt(summary: dict[str, Any]) -> str:
    return (
        f"p50 {summary['ttft_p50_ms']} p99 {summary['ttft_p99_ms']} ms, "
        f"hits {summary['hit_share']:.0%} (n={summary['n']})"
        if summary["n"]
        else "n=0"
    )
