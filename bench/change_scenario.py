"""The change scenario (``bench.scenarios``' third): ingest one unrelated document, then
k changed documents (k = 1, 10, 100); after each, detection runs at once (``POST
/admin/warmup``, in the background, as the debounce would) while requests to the changed
contexts arrive over a window. What the detector should have found is computed apart from
it: each warm entry's queries retrieved afresh after the change.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

from bench.harness import Service
from bench.measure import ChangeRequest, RequestRecord, summarize
from bench.scenario_records import ChangeResult, Cycle, ScenarioConfig
from bench.strategies import Strategy
from bench.workload import AnyWorkload, Topic, unrelated_document
from warmup.reports import CycleKind, CycleReport

Log = Callable[[str], None]


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


def cycles_since(svc: Service, since: float, origin: float | None = None) -> list[Cycle]:
    """The service's cycles begun since ``since`` (epoch s) that did something, with
    ``at_s`` counted from ``origin`` (default ``since``)."""
    origin = since if origin is None else origin
    return [
        Cycle(
            at_s=round(r.started_at - origin, 2),
            kind=r.kind.value,
            **r.model_dump(include=Cycle.COUNTS),
        )
        for r in svc.cycles_since(since)
    ]


def run_change(
    svc: Service,
    strategy: Strategy,
    workload: AnyWorkload,
    config: ScenarioConfig,
    k: int,
    log: Log,
) -> ChangeResult:
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
        registry = svc.registry().entries
        holding = sum(1 for e in registry if changed_ids & set(e.doc_ids))
        warm_before = {q for q in questions if context_of(svc, q) in entries}
    prefill_before = svc.metric("warmrag_warm_prefill_tokens_total")

    started, ingest_at = time.perf_counter(), time.time()
    svc.ingest(docs)
    ingest_ms = (time.perf_counter() - started) * 1000
    reports: list[CycleReport] = []
    detect = threading.Thread(target=lambda: reports.extend(svc.warm_cycle()), daemon=True)
    if strategy.warms:
        detect.start()
    records = ask_over_window(svc, questions, config.change_window_s, started)
    if strategy.warms:
        detect.join()
    truth = changed_contexts(svc, entries) if strategy.warms else None
    report = next((r for r in reports if r.kind is CycleKind.KB_CHANGE), None)
    summary = summarize(records)
    result = ChangeResult(
        k=k,
        label=f"{k} changed" if k else "unrelated",
        documents=len(docs),
        ingest_ms=round(ingest_ms, 1),
        entries_affected_truth=len(truth) if truth is not None else None,
        new_contexts=len({c for new in (truth or {}).values() for c in new}),
        new_contexts_warm=warm_contexts(svc, truth) if truth is not None else None,
        entries_holding_changed_doc=holding,
        entries_detected=report.affected if report else None,
        entries_rewarmed=report.warm_requests_by_reason.get("kb_change", 0) if report else None,
        predicted_warm_requests=report.warm_requests_by_reason.get("predicted", 0)
        if report
        else None,
        detection_ms=report.detection_ms if report else None,
        rewarm_prefill_tokens=report.prefill_tokens_by_reason.get("kb_change", 0)
        if report
        else None,
        predicted_prefill_tokens=report.prefill_tokens_by_reason.get("predicted", 0)
        if report
        else None,
        cycle_prefill_tokens=report.prefill_tokens if report else None,
        warm_prefill_tokens_total=int(
            svc.metric("warmrag_warm_prefill_tokens_total") - prefill_before
        ),
        summary=summary,
        warm_before=summarize([r for r in records if r.question in warm_before]),
        cycles=cycles_since(svc, snapshot_at, ingest_at) if strategy.warms else [],
        requests=[ChangeRequest.of(r, warm_before=r.question in warm_before) for r in records],
    )
    log(
        f"  {strategy.label}: {result.label}: detected {result.entries_detected} of "
        f"{result.entries_affected_truth} changed, re-warmed "
        f"{result.entries_rewarmed} ({result.rewarm_prefill_tokens} tokens); "
        + (summary.line() if records else "no requests")
    )
    return result


def ask_over_window(
    svc: Service, questions: list[str], window_s: float, started: float
) -> list[RequestRecord]:
    """Each question once, spread evenly over ``window_s`` from now (half a second in);
    ``t_s`` counts from ``started`` (the ingest's start)."""
    spacing = window_s / max(1, len(questions))
    window_start = time.perf_counter()
    records = []
    for i, question in enumerate(questions):
        delay = window_start + i * spacing + 0.5 - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t_s = time.perf_counter() - started
        records.append(RequestRecord.of_chat(question, t_s, svc.chat(question)))
    return records


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
    registered = {e.fingerprint for e in svc.registry().entries}
    return len({c for new in changed.values() for c in new} & registered)
