"""Turns a suite's results into ``results.json``, ``report.md`` (tables and the targets,
met or missed, with the reason a number falls short) and PNG plots.

Everything here reads the results dict only, so a report can be rewritten from a
saved ``results.json`` (``python -m bench.report bench/results/<run>/results.json``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# matplotlib keeps a font cache; in the data folder, not the user's home.
os.environ.setdefault(
    "MPLCONFIGDIR", str(Path(__file__).resolve().parent.parent / "data" / "cache" / "matplotlib")
)

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from bench.measure import RequestRecord, summarize

OURS, PLAIN = "s4", "s1"
NO_WORSE_TOLERANCE = 1.05
LINESTYLES = ("-", "--", "-.", ":")  # "no worse": within 5 %, the run-to-run noise of this machine


@dataclass(frozen=True)
class Target:
    name: str
    goal: str
    measured: str
    met: bool | None  # None: not measured in this run
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "goal": self.goal,
            "measured": self.measured,
            "met": self.met,
            "why": self.why,
        }


def _records(section: dict[str, Any]) -> list[RequestRecord]:
    return [RequestRecord.from_json(r) for r in section.get("requests", [])]


def _strategy(results: dict[str, Any], slug: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = results.get("strategies", {}).get(slug)
    return found


def _floor_p50(results: dict[str, Any]) -> float:
    ttft = results.get("floor", {}).get("ttft_ms", [])
    return statistics.median(ttft) if ttft else math.nan


EARLY_S = 5.0  # a change-window request this soon after the ingest may beat its re-warm


def _change_records(strategy: dict[str, Any], warm_before: bool = False) -> list[RequestRecord]:
    """Requests to changed contexts (``warm_before``: only those warm before the change;
    results written before that was recorded count every request)."""
    return [
        RequestRecord.from_json(r)
        for c in strategy.get("change", [])
        if c["k"]
        for r in c["requests"]
        if not warm_before or r.get("warm_before", True)
    ]


def evaluate_targets(results: dict[str, Any]) -> list[Target]:
    """The issue's targets, each met, missed (with why) or not measured."""
    ours, plain = _strategy(results, OURS), _strategy(results, PLAIN)
    targets: list[Target] = []
    if ours is None or plain is None:
        return [Target("all", "strategies 1 and 4 ran", "missing", None, "not in this run")]
    floor = _floor_p50(results)
    retrieval = ours["restart"]["summary"]["retrieval_p50_ms"]

    p_ours, p_plain = (s["restart"]["summary"]["ttft_p50_ms"] for s in (ours, plain))
    ratio = p_plain / p_ours
    limit = p_plain / (floor + retrieval)
    targets.append(
        Target(
            "restart: TTFT p50 vs strategy 1",
            ">= 5x lower",
            f"{ratio:.2f}x ({p_plain:.0f} -> {p_ours:.0f} ms)",
            ratio >= 5,
            ""
            if ratio >= 5
            else f"a warm request cannot beat the floor ({floor:.0f} ms) plus retrieval "
            f"({retrieval:.0f} ms); with strategy 1 at {p_plain:.0f} ms the largest ratio "
            f"this machine and prompt length allow is {limit:.2f}x",
        )
    )
    hits = ours["restart"]["summary"]["hit_share"]
    targets.append(
        Target(
            "restart: share of the first requests on a warm prefix",
            ">= 90%",
            f"{hits:.0%} (strategy 1: {plain['restart']['summary']['hit_share']:.0%})",
            hits >= 0.9,
            "" if hits >= 0.9 else _restart_miss_reason(ours),
        )
    )
    changed, rewarmable = _change_records(ours), _change_records(ours, warm_before=True)
    if rewarmable:
        share = summarize(rewarmable)["hit_share"]
        plain_share = summarize(_change_records(plain))["hit_share"]
        targets.append(
            Target(
                "change: requests to changed contexts on a re-warmed prefix",
                ">= 90% of those warm before the change",
                f"{share:.0%} of {len(rewarmable)} (all {len(changed)} changed contexts: "
                f"{summarize(changed)['hit_share']:.0%}; strategy 1: {plain_share:.0%})",
                share >= 0.9,
                "" if share >= 0.9 else _change_miss_reason(ours),
            )
        )
    targets.extend(_steady_targets(results))
    hits_ttft = [r.ttft_ms for r in _records(ours["steady"]) if r.hit]
    if hits_ttft and not math.isnan(floor):
        warm = statistics.median(hits_ttft)
        targets.append(
            Target(
                "warm TTFT p50 / floor p50",
                "<= 1.5x",
                f"{warm / floor:.2f}x ({warm:.0f} vs {floor:.0f} ms)",
                warm / floor <= 1.5,
                ""
                if warm / floor <= 1.5
                else f"retrieval alone takes {retrieval:.0f} ms of it (the floor has none)",
            )
        )
    unrelated = next((c for c in ours.get("change", []) if c["k"] == 0), None)
    if unrelated is not None:
        spent = unrelated["rewarm_prefill_tokens"]
        targets.append(
            Target(
                "unrelated ingest: re-warm prefill tokens",
                "0",
                f"{spent} (plus {unrelated['predicted_prefill_tokens']} for the new "
                "document's own predicted question)",
                spent == 0,
            )
        )
    for change in ours.get("change", []):
        if not change["k"] or change["entries_affected_truth"] is None:
            continue
        rewarmed, truth = change["entries_rewarmed"] or 0, change["entries_affected_truth"]
        warm_new = change.get("new_contexts_warm")
        coverage = (
            f"; {warm_new} of {change['new_contexts']} new contexts warm after the cycle"
            if warm_new is not None
            else ""
        )
        targets.append(
            Target(
                f"{change['k']}-document change: prefills only for affected entries",
                f"re-warms <= {truth} entries whose context changed",
                f"{rewarmed} re-warmed, {change['rewarm_prefill_tokens']} tokens{coverage}",
                rewarmed <= truth,
                ""
                if rewarmed <= truth
                else "detection re-warmed entries whose recomputed context did not change",
            )
        )
    ingest = results.get("scale", {}).get("ingest")
    if ingest:
        ratio = ingest["ratio"]
        targets.append(
            Target(
                "ingest throughput / raw embedding throughput",
                ">= 85%",
                # One decimal: a ratio just under the line must not print as 85 %.
                f"{ratio:.1%} ({ingest['ingest_chunks_per_s']:.1f} vs "
                f"{ingest['raw_chunks_per_s']:.1f} chunks/s)",
                ratio >= 0.85,
                ""
                if ratio >= 0.85
                else f"chunking and the Qdrant upsert take {1 - ratio:.1%} of the pipeline's "
                "time next to embedding",
            )
        )
    return targets


def _steady_targets(results: dict[str, Any]) -> list[Target]:
    ours = results["strategies"][OURS]["steady"]["summary"]
    others = {
        slug: s["steady"]["summary"] for slug, s in results["strategies"].items() if slug != OURS
    }
    targets = []
    for key, label in (("ttft_p50_ms", "p50"), ("ttft_p99_ms", "p99")):
        worse = [s for s, v in others.items() if ours[key] > v[key] * NO_WORSE_TOLERANCE]
        not_better = [s for s in ("s1", "s2", "s3") if s in others and ours[key] >= others[s][key]]
        measured = f"{ours[key]:.0f} ms vs " + ", ".join(
            f"{s}: {v[key]:.0f}" for s, v in sorted(others.items())
        )
        problems = []
        if worse:
            problems.append(f"worse than {', '.join(worse)}")
        if not_better:
            problems.append(f"not better than {', '.join(not_better)}")
        targets.append(
            Target(
                f"steady state: TTFT {label}",
                "no worse than any (5% noise), better than 1-3",
                measured,
                not problems,
                "; ".join(problems),
            )
        )
    return targets


def _restart_miss_reason(ours: dict[str, Any]) -> str:
    state = ours["restart"]["state"]
    misses = [r for r in _records(ours["restart"]) if not r.hit]
    reasons = ours["restart"].get("misses")
    if reasons is None:  # results written before misses were classified
        reasons = {"never asked before": sum(r.first_sight for r in misses)}
    why = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items(), key=lambda i: -i[1]))
    return f"{len(misses)} misses: {why}; {state['warm_entries']} entries were warm"


def _change_miss_reason(ours: dict[str, Any]) -> str:
    """Misses in the first seconds came before their re-warm; later ones went to a
    context the cycle left cold, so say how many new contexts it warmed and detected."""
    parts, early_total, late_total = [], 0, 0
    for c in ours.get("change", []):
        if not c["k"]:
            continue
        misses = [r for r in c["requests"] if not r["hit"] and r.get("warm_before", True)]
        early = sum(r["t_s"] < EARLY_S for r in misses)
        early_total, late_total = early_total + early, late_total + len(misses) - early
        part = f"k={c['k']}: {len(misses)} misses ({early} in the first {EARLY_S:.0f} s)"
        if len(misses) > early and c.get("new_contexts_warm") is not None:
            part += (
                f", {c['new_contexts_warm']} of {c['new_contexts']} new contexts warm after "
                f"the cycle, {c['entries_detected']} of {c['entries_affected_truth']} changed "
                "entries detected"
            )
        parts.append(part)
    causes = []
    if early_total:
        causes.append("a request in the first seconds arrives before its re-warm finishes")
    if late_total:
        causes.append(
            "a later miss went to a context the cycle left cold (not detected, refused by "
            "the budget or displaced by a hotter entry)"
        )
    return "; ".join(parts) + (" - " + "; ".join(causes) if causes else "")


# ----- markdown ---------------------------------------------------------------------


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


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows), ""]


def _ms(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0f}"


def _pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0%}"


def render_markdown(results: dict[str, Any], targets: Sequence[Target]) -> str:
    meta = results.get("meta", {})
    strategies = results.get("strategies", {})
    lines = [
        "# warmrag benchmark report",
        "",
        f"Run {meta.get('started', '?')} ({'quick' if meta.get('quick') else 'full'}"
        f"{', interrupted: partial results' if meta.get('interrupted') else ''}), "
        f"{meta.get('duration_s', 0) / 60:.1f} min on {meta.get('machine', '?')}"
        + (f", commit {meta['commit']}." if meta.get("commit") else "."),
        f"Workload: {meta.get('corpus', '?')}. Command: `{meta.get('command', 'make bench')}`"
        + (f" (arguments: `{meta['argv']}`)." if meta.get("argv") else "."),
        "",
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
    lines += ["## Steady state (whole stream, each strategy from a reset prefix cache)", ""]
    rows = []
    for s in strategies.values():
        sm, fs, st = s["steady"]["summary"], s["steady"]["first_sight"], s["steady"]["after_stream"]
        rows.append(
            [
                s["strategy"],
                _ms(sm["ttft_p50_ms"]),
                _ms(sm["ttft_p95_ms"]),
                _ms(sm["ttft_p99_ms"]),
                _pct(sm["hit_share"]),
                f"{_pct(fs['hit_share'])} of {fs['n']}",
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
            f"{_floor_p50(results):.0f} ms over {floor['n']} questions.",
            "",
        ]
    lines += ["## Restart (first requests after `/ready`)", ""]
    lines += _table(
        ["strategy", "ready after s", "TTFT p50 ms", "p95", "p99", "warm hits", "entries warm"],
        [
            [
                s["strategy"],
                f"{s['restart']['ready_s']:.1f}",
                _ms(s["restart"]["summary"]["ttft_p50_ms"]),
                _ms(s["restart"]["summary"]["ttft_p95_ms"]),
                _ms(s["restart"]["summary"]["ttft_p99_ms"]),
                _pct(s["restart"]["summary"]["hit_share"]),
                s["restart"]["state"]["warm_entries"] or "-",
            ]
            for s in strategies.values()
        ],
    )
    lines += ["## Knowledge-base change (requests to the changed contexts in the window after)", ""]
    rows = []
    for s in strategies.values():
        for c in s.get("change", []):
            rows.append(
                [
                    s["strategy"],
                    c["label"],
                    _na(c["entries_affected_truth"]),
                    _na(c.get("entries_holding_changed_doc")),
                    _na(c["entries_detected"]),
                    _na(c["entries_rewarmed"]),
                    _na(c.get("new_contexts_warm")),
                    _na(c["rewarm_prefill_tokens"]),
                    _na(c["predicted_prefill_tokens"]),
                    _na(c["detection_ms"]),
                    _ms(c["summary"]["ttft_p50_ms"]),
                    _pct(c["summary"]["hit_share"]),
                    _pct(c.get("warm_before", {}).get("hit_share", math.nan)),
                    c["summary"]["n"],
                ]
            )
    lines += _table(
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
    lines += _cycles_markdown(strategies)
    pressure = results.get("pressure", {})
    lines += ["## Pressure (KV cache smaller than the working set)", ""]
    if pressure.get("skipped"):
        lines += [f"Skipped: {pressure['skipped']}", ""]
    elif pressure:
        lines += [pressure.get("description", ""), ""]
        lines += _table(
            ["strategy", "TTFT p50 ms", "p95", "p99", "warm hits", "warmup prefill tokens"],
            [
                [
                    s["strategy"],
                    _ms(s["steady"]["summary"]["ttft_p50_ms"]),
                    _ms(s["steady"]["summary"]["ttft_p95_ms"]),
                    _ms(s["steady"]["summary"]["ttft_p99_ms"]),
                    _pct(s["steady"]["summary"]["hit_share"]),
                    s["steady"]["after_stream"]["warm_prefill_tokens"],
                ]
                for s in pressure.get("strategies", {}).values()
            ],
        )
    lines += _scale_markdown(results.get("scale", {}))
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


def _kv_share(state: dict[str, Any]) -> str:
    """Registry tokens over the KV cache's capacity (vLLM's own usage gauge counts only
    blocks of running requests, so it reads 0 between requests)."""
    capacity = state.get("kv_capacity_tokens")
    if not capacity:
        return "-"
    return f"{state['warm_tokens']} tokens ({state['warm_tokens'] / capacity:.0%})"


def _na(value: object) -> str:
    return "-" if value is None else str(value)


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
        ["chunks", "retrieval p50 ms", "p95"],
        [[r["chunks"], f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}"] for r in scale["retrieval"]],
    )
    lines += _table(
        ["triples", "subgraph p50 ms", "p99"],
        [[r["triples"], f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"] for r in scale["subgraph"]],
    )
    lines += _table(
        ["warm entries", "detection p50 ms (cold caches)", "warm caches"],
        [
            [r["entries"], f"{r['cold_p50_ms']:.2f}", f"{r['warm_p50_ms']:.2f}"]
            for r in scale["detection"]
        ],
    )
    return lines


# ----- plots ------------------------------------------------------------------------


def _line_style(index: int, strategy: dict[str, Any]) -> dict[str, Any]:
    """One line per strategy; ours drawn thicker."""
    return {
        "label": strategy["strategy"],
        "linestyle": LINESTYLES[index % len(LINESTYLES)],
        "linewidth": 2.2 if strategy["number"] == 4 else 1.3,
    }


def _save(fig: Any, ax: Any, title: str, path: Path) -> None:
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ttft_distributions(results: dict[str, Any], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for n, s in enumerate(results.get("strategies", {}).values()):
        ttft = sorted(r.ttft_ms for r in _records(s["steady"]))
        if ttft:
            ax.plot(
                ttft,
                [(i + 1) / len(ttft) for i in range(len(ttft))],
                **_line_style(n, s),
            )
    floor = results.get("floor", {}).get("ttft_ms", [])
    if floor:
        ax.axvline(statistics.median(floor), color="grey", linestyle=":", label="floor p50")
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms, log scale)")
    ax.set_ylabel("share of requests")
    _save(fig, ax, "TTFT distribution, steady stream", path)


def rolling_hit_share(records: Sequence[RequestRecord], window: int) -> list[float]:
    hits = [1.0 if r.hit else 0.0 for r in records]
    return [
        sum(hits[max(0, i - window + 1) : i + 1]) / min(window, i + 1) for i in range(len(hits))
    ]


def plot_hit_rate(results: dict[str, Any], path: Path, window: int = 20) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    boundary = 0
    for i, s in enumerate(results.get("strategies", {}).values()):
        steady, restart = _records(s["steady"]), _records(s["restart"])
        boundary = len(steady)
        ax.plot(
            rolling_hit_share(steady + restart, window),
            **_line_style(i, s),
        )
    if boundary:
        ax.axvline(boundary, color="grey", linestyle=":", label="restart")
    ax.set_xlabel("request")
    ax.set_ylabel(f"warm hit share (last {window})")
    ax.set_ylim(-0.02, 1.02)
    _save(fig, ax, "Hit share over time: steady stream, then restart", path)


def plot_after_change(results: dict[str, Any], path: Path) -> None:
    sizes = sorted(
        {c["k"] for s in results.get("strategies", {}).values() for c in s.get("change", [])} - {0}
    )
    fig, axes = plt.subplots(1, max(1, len(sizes)), figsize=(4 * max(1, len(sizes)), 4))
    axes_list = list(axes) if len(sizes) > 1 else [axes]
    for ax, k in zip(axes_list, sizes, strict=False):
        for s in results.get("strategies", {}).values():
            change = next((c for c in s.get("change", []) if c["k"] == k), None)
            if change:
                records = _records(change)
                ax.plot(
                    [r.t_s for r in records],
                    [r.ttft_ms for r in records],
                    marker="o",
                    linestyle="",
                    markersize=4,
                    label=s["strategy"],
                )
        ax.set_title(f"{k} changed document{'s' if k > 1 else ''}")
        ax.set_xlabel("seconds after the ingest began")
        ax.set_ylabel("TTFT (ms)")
        ax.grid(alpha=0.3)
    axes_list[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write results.json, report.md and the plots into ``out_dir``; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = evaluate_targets(results)
    results = {**results, "targets": [t.to_json() for t in targets]}
    paths = [out_dir / "results.json", out_dir / "report.md"]
    paths[0].write_text(json.dumps(results, indent=1, allow_nan=True) + "\n")
    paths[1].write_text(render_markdown(results, targets))
    for name, plot in (
        ("ttft_steady.png", plot_ttft_distributions),
        ("hit_rate_over_time.png", plot_hit_rate),
        ("ttft_after_change.png", plot_after_change),
    ):
        plot(results, out_dir / name)
        paths.append(out_dir / name)
    return paths


if __name__ == "__main__":
    source = Path(sys.argv[1])
    for written in write_report(json.loads(source.read_text()), source.parent):
        print(written)
