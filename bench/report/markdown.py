"""``report.md``: the targets table, one section per scenario (steady state, restart,
knowledge-base change, warmup cycles, pressure, scale) and links to the plots.

Apart from the targets and the plots: this is layout only, it judges and draws nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.measure import Summary
from bench.report.real import real_markdown
from bench.report.tables import change_table, ms, pct
from bench.report.tables import table as _table
from bench.report.targets import Target
from bench.scale_records import RetrievalRow, ScaleResult
from bench.scenario_records import (
    Cycle,
    PressureResult,
    Skipped,
    StrategyResult,
    WarmupState,
)
from bench.suite_records import RunMeta, SuiteResults


def _cycle_text(cycle: Cycle) -> str:
    done = f"{cycle.warm_requests} prefills, {cycle.retired} retired"
    if cycle.affected:
        done += f", {cycle.affected} affected"
    if cycle.extended:
        done += f", {cycle.extended} extended"
    return f"{cycle.kind} at {cycle.at_s:.1f} s ({done})"


def _cycles_markdown(strategies: dict[str, StrategyResult]) -> list[str]:
    """What the warmup layer did while each scenario ran (results from before this was
    recorded have no cycles and get no section)."""
    rows = []
    for s in strategies.values():
        scenarios: list[tuple[str, list[Cycle]]] = [("steady stream", s.steady.cycles)]
        if s.restart is not None:
            scenarios.append(("restart", s.restart.cycles))
        scenarios += [(c.label, c.cycles) for c in s.change]
        for name, cycles in scenarios:
            if cycles:
                rows.append([s.strategy, name, "; ".join(map(_cycle_text, cycles))])
    if not rows:
        return []
    return [
        "## Warmup cycles during the scenarios",
        "",
        "Cycles that warmed, retired, extended or detected something; times from the "
        "stream's start, the service's start (restart) or the ingest's start (change: a "
        "negative time is between the registry snapshot and the ingest).",
        "",
        *_table(["strategy", "scenario", "cycles"], rows),
    ]


def render_markdown(results: SuiteResults, targets: Sequence[Target]) -> str:
    meta = results.meta
    lines = [
        "# warmrag benchmark report",
        "",
        f"Run {meta.started or '?'} ({'quick' if meta.quick else 'full'}"
        f"{_run_state(meta)}), "
        f"{(meta.duration_s or 0) / 60:.1f} min on {meta.machine or '?'}"
        + (f", commit {meta.commit}." if meta.commit else "."),
        f"Workload: {meta.corpus or '?'}. Command: `{meta.command or 'make bench'}`"
        + (f" (arguments: `{meta.argv}`)." if meta.argv else "."),
        "",
        *_failures_markdown(meta),
        "## Targets",
        "",
    ]
    lines += _table(
        ["target", "goal", "measured", "met", "why not"],
        [
            [t.name, t.goal, t.measured, {True: "yes", False: "**no**", None: "-"}[t.met], t.why]
            for t in targets
        ],
    )
    if not results.strategies:
        lines += ["## Steady state, restart, change", "", "Skipped: not among the sections run", ""]
    else:
        lines += _main_markdown(results)
    lines += _pressure_markdown(results.pressure)
    lines += _scale_markdown(results.scale)
    lines += real_markdown(results.real)
    if not results.strategies:
        return "\n".join(lines)
    lines += [
        "## Plots",
        "",
        "![TTFT per strategy](ttft_steady.png)",
        "",
        "![Hit share over time](hit_rate_over_time.png)",
        "",
        "![TTFT after a change](ttft_after_change.png)",
        "",
    ]
    return "\n".join(lines)


def _run_state(meta: RunMeta) -> str:
    """The run line's note on what is missing: failed sections, or a Ctrl-C."""
    failed = [f.section for f in meta.failed_sections]
    state = f", failed: {', '.join(failed)}" if failed else ""
    if meta.interrupted:
        where = meta.interrupted_in
        state += f", interrupted{f' in {where}' if where else ''}"
    return state + (": partial results" if state else "")


def _failures_markdown(meta: RunMeta) -> list[str]:
    """Each failed section with its error (the traceback is in results.json); a run saved
    before sections were recorded one by one has a single ``error``."""
    if not meta.failed_sections and not meta.error:
        return []
    lines = ["## Failed sections", ""]
    lines += [f"- **{f.section}**: `{f.error}`" for f in meta.failed_sections]
    if meta.error:
        lines.append(f"- `{meta.error}`")
    return [*lines, ""]


def _latency_cells(summary: Summary) -> list[str]:
    """TTFT p50, p95, p99 and the warm hit share."""
    return [
        ms(summary.ttft_p50_ms),
        ms(summary.ttft_p95_ms),
        ms(summary.ttft_p99_ms),
        pct(summary.hit_share),
    ]


def _main_markdown(results: SuiteResults) -> list[str]:
    """The main section: steady state, floor, restart, change and the warmup cycles."""
    strategies = results.strategies
    lines = ["## Steady state (whole stream, each strategy from a reset prefix cache)", ""]
    rows = []
    for s in strategies.values():
        steady = s.steady
        rows.append(
            [
                s.strategy,
                *_latency_cells(steady.summary),
                f"{pct(steady.first_sight.hit_share)} of {steady.first_sight.n}",
                steady.after_stream.warm_prefill_tokens,
                _kv_share(steady.after_stream),
            ]
        )
    lines += _table(
        [
            "strategy",
            "TTFT p50 ms",
            "p95",
            "p99",
            "warm hits",
            "first-sight hits",
            "warmup prefill tokens",
            "KV cache held warm",
        ],
        rows,
    )
    if results.floor and results.floor.ttft_ms:
        lines += [
            f"Floor (the same questions with no context, straight to vLLM): p50 "
            f"{results.floor.p50:.0f} ms over {results.floor.n} questions.",
            "",
        ]
    lines += ["## Restart (first requests after `/ready`)", ""]
    lines += _table(
        ["strategy", "ready after s", "TTFT p50 ms", "p95", "p99", "warm hits", "entries warm"],
        [
            [
                s.strategy,
                f"{s.restart.ready_s:.1f}",
                *_latency_cells(s.restart.summary),
                s.restart.state.warm_entries or "-",
            ]
            for s in strategies.values()
            if s.restart is not None
        ],
    )
    lines += ["## Knowledge-base change (requests to the changed contexts in the window after)", ""]
    lines += change_table(strategies)
    lines += _cycles_markdown(strategies)
    return lines


def _pressure_markdown(pressure: PressureResult | Skipped | None) -> list[str]:
    lines = ["## Pressure (KV cache smaller than the working set)", ""]
    if isinstance(pressure, Skipped):
        lines += [f"Skipped: {pressure.skipped}", ""]
    elif pressure is not None:
        lines += [pressure.description, ""]
        lines += _table(
            ["strategy", "TTFT p50 ms", "p95", "p99", "warm hits", "warmup prefill tokens"],
            [
                [
                    s.strategy,
                    *_latency_cells(s.steady.summary),
                    s.steady.after_stream.warm_prefill_tokens,
                ]
                for s in pressure.strategies.values()
            ],
        )
        if pressure.hot_set:
            lines += ["The hot set among cold traffic:", ""]
            lines += _table(
                ["run", "hot requests", "hot hits", "hot TTFT p99 ms", "all TTFT p99 ms",
                 "p99 vs LRU", "re-touch share of engine time", "re-warms on eviction"],
                [
                    [key, h.n, f"{h.hits} ({h.hit_share:.0%})", h.ttft_p99_ms, h.all_ttft_p99_ms,
                     h.all_ttft_p99_ratio, f"{h.retouch_share:.1%}", h.evicted_rewarms]
                    for key, h in pressure.hot_set.items()
                ],
            )  # fmt: skip
    return lines


def _kv_share(state: WarmupState) -> str:
    """Registry tokens over the KV cache's capacity (vLLM's own usage gauge counts only
    blocks of running requests, so it reads 0 between requests)."""
    capacity = state.kv_capacity_tokens
    if not capacity:
        return "-"
    return f"{state.warm_tokens} tokens ({state.warm_tokens / capacity:.0%})"


def _scale_markdown(scale: ScaleResult | None) -> list[str]:
    lines = ["## Scale", ""]
    if scale is None:
        return [*lines, "Skipped: not run", ""]
    ingest = scale.ingest
    lines += [
        f"Ingest: {ingest.ingest_chunks_per_s:.1f} chunks/s through the pipeline into the index "
        f"vs {ingest.raw_chunks_per_s:.1f} chunks/s raw embedding ({ingest.ratio:.1%}), "
        f"{ingest.chunks} chunks.",
        "",
    ]
    lines += _table(
        ["chunks", "retrieval p50 ms", "p95", "p99", "recall@10", "HNSW s", "search waited s",
         "open s", "RSS MiB"],
        [
            [r.chunks, f"{r.p50_ms:.1f}", f"{r.p95_ms:.1f}", _opt(r.p99_ms), _opt(r.recall_at_10),
             _opt(r.index_s), _opt(r.search_wait_max_s), _opt(r.open_s), _rss(r)]
            for r in scale.retrieval
        ],
    )  # fmt: skip
    lines += _table(
        ["triples", "subgraph p50 ms", "p99"],
        [[r.triples, f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}"] for r in scale.subgraph],
    )
    if scale.graph_quality:  # runs from before it was measured have none
        lines += _captioned(
            "Graph quality: two-step questions (the answering triple two hops from the "
            "question's entity, `bench/kg_multihop.py`); share whose answer is among the 3 "
            "triples chosen, by selection mode.",
            ["questions", "mode", "asked", "answer in 3", "restating a pair", "p50 ms"],
            [[r.questions_set, r.mode, r.questions, f"{r.answer_share:.1%}",
              f"{r.restating_selections:.1%}", f"{r.p50_ms:.2f}"]
             for r in scale.graph_quality],
        )  # fmt: skip
    lines += _table(
        ["warm entries", "detection p50 ms (cold caches)", "warm caches"],
        [[r.entries, f"{r.cold_p50_ms:.2f}", f"{r.warm_p50_ms:.2f}"] for r in scale.detection],
    )
    if scale.entity_link:  # runs from before it was measured have none
        lines += _captioned(
            "Entity link by embedding (`bench/entity_cells.py`): vectors drawn like the real "
            "corpus's entities, the scale questions; the nearest cells' rows against every "
            "row's, both from turned int8 codes; recall: of the entities the full scan "
            "links, the share the cells' scan links.",
            ["entities", "linked per question", "recall", "same choice", "rows read",
             "p50 ms every row", "p50 ms cells", "coding s every row", "coding s cells"],
            [[r.entities, f"{r.linked_per_question:.2f}", f"{r.recall:.3f}",
              f"{r.same_choice:.1%}", f"{r.read_share:.1%}", f"{r.every_row_ms_p50:.2f}",
              f"{r.cells_ms_p50:.2f}", f"{r.coding_s:.1f}", f"{r.coding_cells_s:.1f}"]
             for r in scale.entity_link],
        )  # fmt: skip
    if scale.startup:  # runs from before it was measured have none
        lines += _captioned(
            "Start-up: `python -m api serve` on a data folder of that size (a graph of the "
            "real corpus's triples per chunk), a vLLM already running; seconds from the "
            "process's start; the first start on a folder builds the graph's snapshot from "
            "its rows (as after a crash), one after a clean stop reads it back."
            + "".join(f" Embedded with {e}." for e in sorted({r.embedding for r in scale.startup})
                      if e),
            ["chunks", "triples", "start", "/health s", "/ready s", "RSS MiB at /ready",
             "settled", "of it own (anon)", "peak by /ready", "peak", "index RSS MiB",
             "first chat s", "first change s", "questions", "p50 / p99 ms", "RSS MiB after them",
             "index after them", "paced (0.1 s apart)", "p50 / p99 ms", "stop s"],
            [[r.chunks, r.triples, "after a stop" if r.after_stop else "first",
              f"{r.health_s:.1f}", f"{r.ready_s:.1f}", r.service_rss_mib, r.settled_rss_mib,
              r.settled_anon_mib or "–", r.ready_peak_mib or "–", r.service_peak_mib,
              r.index_rss_mib,
              f"{r.first_chat_s:.2f}",
              f"{r.first_change_s:.1f}", r.questions or "–",
              f"{r.question_p50_ms:.1f} / {r.question_p99_ms:.1f}" if r.questions else "–",
              r.questions_rss_mib or "–", r.questions_index_rss_mib or "–", r.paced or "–",
              f"{r.paced_p50_ms:.1f} / {r.paced_p99_ms:.1f}" if r.paced else "–",
              f"{r.stop_s:.1f}" if r.stop_s else "–"]
             for r in scale.startup],
        )  # fmt: skip
    return lines


def _captioned(caption: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A table with a line of text above it."""
    return [caption, "", *_table(header, rows)]


def _opt(value: float | None) -> str:
    """A figure older runs did not record: "-" for them."""
    return "-" if value is None else f"{value:g}"


def _rss(row: RetrievalRow) -> str:
    """The service's RSS and the index process's, where recorded."""
    if row.rss_mib is None:
        return "-"
    return f"{row.rss_mib} + {row.index_rss_mib} (index)"


def _share(row: RetrievalRow) -> str:
    """Top-1 own-town share of a retrieval row (runs from before it was recorded have none)."""
    share = row.top1_own_town_share
    return "-" if share is None else f"{share:.0%}"
