"""Turns a suite's results into ``results.json``, ``report.md`` (tables and the targets,
met or missed, with the reason a number falls short) and PNG plots.

Everything here reads the typed results only (``bench.suite_records``), so a report can
be rewritten from a saved ``results.json`` (``python -m bench.report
bench/results/<run>/results.json``). The package holds ``write_report``, which ties the
parts together: ``targets`` judges the numbers, ``markdown`` lays them out, ``plots``
draws them.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.report.markdown import render_markdown
from bench.report.plots import (
    plot_after_change,
    plot_hit_rate,
    plot_ttft_distributions,
    rolling_hit_share,
)
from bench.report.real import real_targets
from bench.report.targets import evaluate_targets
from bench.suite_records import SuiteResults

__all__ = ["evaluate_targets", "read_results", "rolling_hit_share", "write_report"]


def read_results(path: Path) -> SuiteResults:
    """A saved results.json (its targets are judged again when the report is written)."""
    return SuiteResults.model_validate(json.loads(path.read_text()))


def write_report(results: SuiteResults, out_dir: Path) -> list[Path]:
    """Write results.json, report.md and the plots into ``out_dir``; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = evaluate_targets(results) + real_targets(results)
    written = {**results.to_json(), "targets": [t.to_json() for t in targets]}
    paths = [out_dir / "results.json", out_dir / "report.md"]
    paths[0].write_text(json.dumps(written, indent=1, allow_nan=True) + "\n")
    paths[1].write_text(render_markdown(results, targets))
    if not results.strategies:
        return paths  # the plots draw the main section, which did not run
    for name, plot in (
        ("ttft_steady.png", plot_ttft_distributions),
        ("hit_rate_over_time.png", plot_hit_rate),
        ("ttft_after_change.png", plot_after_change),
    ):
        plot(results, out_dir / name)
        paths.append(out_dir / name)
    return paths
