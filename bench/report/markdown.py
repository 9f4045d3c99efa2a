"""``report.md``: the targets table, one section per scenario (steady state, restart,
knowledge-base change, warmup cycles, pressure, scale) and links to the plots.

Apart from the targets and the plots: this is layout only, it judges and draws nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.report.real import real_markdown
from bench.report.results import floor_p50
from bench.report.tables import change_table, ms, pct
from bench.report.tables import table as _table
from bench.report.targets import Target


def _cycle_text(cycle: dict[str, Any]) -> str:
    done = f"{cycle['warm_requests']} prefills, {cycle['retired']} retired"
    if cycle["affected"]:
        done += f", {cycle['affected']} affected"
    if cycle["extended"]:
        done += f", {cycle['extended']} extended"
    return f"{cycle['kind']} at {cycle['at_s']:.1f} s ({done})"


def _cycles_markdown(strategies: dict[str, Any]) -> list[str]:
    """What the warmup layer did while each scenario ran (results from before this was
    recorded have no cycles and get no section)."""
    rows = []
    for s in strategies.values():
        scenarios = [("steady stream", s.get("steady", {})), ("restart", s.get("restart", {}))]
        scenarios += [(c["label"], c) for c in s.get("change", [])]
        for name, part in scenarios:
            if part.get("cycles"):
                rows.append([s["strategy"], name, "; ".join(map(_cycle_text, part["cycles"]))])
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


def render_markdown(results: dict[str, Any], targets: Sequence[Target]) -> str:
    meta = results.get("meta", {})
    strategies = results.get("strategies", {})
    lines = [
        "# warmrag benchmark report",
        "",
        f"Run {meta.get('started', '?')} ({'quick' if meta.get('quick') else 'full'}"
        f"{_run_state(meta)}), "
        f"{meta.get('duration_s', 0) / 60:.1f} min on {meta.get('machine', '?')}"
        + (f", commit {meta['commit']}." if meta.get("commit") else "."),
        f"Workload: {meta.get('corpus', '?')}. Command: `{meta.get('command', 'make bench')}`"
        + (f" (arguments: `{meta['argv']}`)." if meta.get("argv") else "."),
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
    if not strategies:
        lines += ["## Steady state, restart, change", "", "Skipped: not among the sections run", ""]
    else:
        lines += _main_markdown(results)
    lines += _pressure_markdown(results.get("pressure", {}))
    lines += _scale_markdown(results.get("scale", {}))
    lines += real_markdown(results.get("real", {}))
    if not strategies:
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


def _run_state(meta: dict[str, Any]) -> str:
    """The run line's note on what is missing: failed sections, or a Ctrl-C."""
    failed = [f["section"] for f in meta.get("failed_sections", [])]
    state = f", failed: {', '.join(failed)}" if failed else ""
    if meta.get("interrupted"):
        where = meta.get("interrupted_in")
        state += f", interrupted{f' in {where}' if where else ''}"
    return state + (": partial results" if state else "")


def _failures_markdown(meta: dict[str, Any]) -> list[str]:
    """Each failed section with its error (the traceback is in results.json); a run saved
    before sections were recorded one by one has a single ``error``."""
    failed = meta.get("failed_sections", [])
    if not failed and not meta.get("error"):
        return []
    lines = ["## Failed sections", ""]
    lines += [f"- **{f['section']}**: `{f['error']}`" for f in failed]
    if meta.get("error"):
        lines.append(f"- `{meta['error']}`")
    return [*lines, ""]


def _main_markdown(results: dict[str, Any]) -> list[str]:
    """The main section: steady state, floor, restart, change and the warmup cycles."""
    strategies = results["strategies"]
    lines = ["## Steady state (whole stream, each strategy from a reset prefix cache)", ""]
    rows = []
    for s in strategies.values():
        sm, fs, st = s["steady"]["summary"], s["steady"]["first_sight"], s["steady"]["after_stream"]
        rows.append(
            [
                s["strategy"],
                ms(sm["ttft_p50_ms"]),
                ms(sm["ttft_p95_ms"]),
                ms(sm["ttft_p99_ms"]),
                pct(sm["hit_share"]),
                f"{pct(fs['hit_share'])} of {fs['n']}",
                st["warm_prefill_tokens"],
                _kv_share(st),
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
    floor = results.get("floor", {})
    if floor.get("ttft_ms"):
        lines += [
            f"Floor (the same questions with no context, straight to vLLM): p50 "
            f"{floor_p50(results):.0f} ms over {floor['n']} questions.",
            "",
        ]
    lines += ["## Restart (first requests after `/ready`)", ""]
    lines += _table(
        ["strategy", "ready after s", "TTFT p50 ms", "p95", "p99", "warm hits", "entries warm"],
        [
            [
                s["strategy"],
                f"{s['restart']['ready_s']:.1f}",
                ms(s["restart"]["summary"]["ttft_p50_ms"]),
                ms(s["restart"]["summary"]["ttft_p95_ms"]),
                ms(s["restart"]["summary"]["ttft_p99_ms"]),
                pct(s["restart"]["summary"]["hit_share"]),
                s["restart"]["state"]["warm_entries"] or "-",
            ]
            for s in strategies.values()
        ],
    )
    lines += ["## Knowledge-base change (requests to the changed contexts in the window after)", ""]
    lines += change_table(strategies)
    lines += _cycles_markdown(strategies)
    return lines


def _pressure_markdown(pressure: dict[str, Any]) -> list[str]:
    lines = ["## Pressure (KV cache smaller than the working set)", ""]
    if pressure.get("skipped"):
        lines += [f"Skipped: {pressure['skipped']}", ""]
    elif pressure:
        lines += [pressure.get("description", ""), ""]
        lines += _table(
            ["strategy", "TTFT p50 ms", "p95", "p99", "warm hits", "warmup prefill tokens"],
            [
                [
                    s["strategy"],
                    ms(s["steady"]["summary"]["ttft_p50_ms"]),
                    ms(s["steady"]["summary"]["ttft_p95_ms"]),
                    ms(s["steady"]["summary"]["ttft_p99_ms"]),
                    pct(s["steady"]["summary"]["hit_share"]),
                    s["steady"]["after_stream"]["warm_prefill_tokens"],
                ]
                for s in pressure.get("strategies", {}).values()
            ],
        )
    return lines


def _kv_share(state: dict[str, Any]) -> str:
    """Registry tokens over the KV cache's capacity (vLLM's own usage gauge counts only
    blocks of running requests, so it reads 0 between requests)."""
    capacity = state.get("kv_capacity_tokens")
    if not capacity:
        return "-"
    return f"{state['warm_tokens']} tokens ({state['warm_tokens'] / capacity:.0%})"


def _scale_markdown(scale: dict[str, Any]) -> list[str]:
    lines = ["## Scale", ""]
    if not scale or scale.get("skipped"):
        return [*lines, f"Skipped: {scale.get('skipped', 'not run')}", ""]
    ingest = scale["ingest"]
    lines += [
        f"Ingest: {ingest['ingest_chunks_per_s']:.1f} chunks/s through the pipeline into Qdrant "
        f"vs {ingest['raw_chunks_per_s']:.1f} chunks/s raw embedding ({ingest['ratio']:.1%}), "
        f"{ingest['chunks']} chunks.",
        "",
    ]
    lines += _table(
        ["chunks", "retrieval p50 ms", "p95", "top-1 own town"],
        [
            [r["chunks"], f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", _share(r)]
            for r in scale["retrieval"]
        ],
    )
    lines += _table(
        ["triples", "subgraph p50 ms", "p99"],
        [[r["triples"], f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"] for r in scale["subgraph"]],
    )
    if scale.get("graph_quality"):  # runs from before it was measured have none
        lines += [
            "Graph quality: two-step questions (the answering triple two hops from the "
            "question's entity, `bench/kg_multihop.py`); share whose answer is among the 3 "
            "triples chosen, by selection mode.",
            "",
        ]
        lines += _table(
            ["questions", "mode", "asked", "answer in 3", "restating a pair", "p50 ms"],
            [
                [
                    r["questions_set"],
                    r["mode"],
                    r["questions"],
                    f"{r['answer_share']:.1%}",
                    f"{r['restating_selections']:.1%}",
                    f"{r['p50_ms']:.2f}",
                ]
                for r in scale["graph_quality"]
            ],
        )
    lines += _table(
        ["warm entries", "detection p50 ms (cold caches)", "warm caches"],
        [
            [r["entries"], f"{r['cold_p50_ms']:.2f}", f"{r['warm_p50_ms']:.2f}"]
            for r in scale["detection"]
        ],
    )
    return lines


def _share(row: dict[str, Any]) -> str:
    """Top-1 own-town share of a retrieval row (runs from before it was recorded have none)."""
    share = row.get("top1_own_town_share")
    return "-" if share is None else f"{share:.0%}"
