"""The PNG plots: TTFT distributions in the steady stream, hit share over time across a
restart, and TTFT after each knowledge-base change.

Apart from the rest because it alone needs matplotlib (set up here for files only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# matplotlib keeps a font cache; in the data folder, not the user's home.
os.environ.setdefault(
    "MPLCONFIGDIR",
    str(Path(__file__).resolve().parent.parent.parent / "data" / "cache" / "matplotlib"),
)

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from bench.measure import RequestRecord
from bench.scenario_records import StrategyResult
from bench.suite_records import SuiteResults

LINESTYLES = ("-", "--", "-.", ":")


def _plot_line(ax: Any, index: int, strategy: StrategyResult, x: Any, y: Any) -> None:
    """One line per strategy; ours drawn thicker."""
    ax.plot(
        x,
        y,
        label=strategy.strategy,
        linestyle=LINESTYLES[index % len(LINESTYLES)],
        linewidth=2.2 if strategy.number == 4 else 1.3,
    )


def _save(fig: Any, ax: Any, title: str, path: Path) -> None:
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ttft_distributions(results: SuiteResults, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for n, s in enumerate(results.strategies.values()):
        ttft = sorted(r.ttft_ms for r in s.steady.requests)
        if ttft:
            _plot_line(ax, n, s, ttft, [(i + 1) / len(ttft) for i in range(len(ttft))])
    if results.floor and results.floor.ttft_ms:
        ax.axvline(results.floor.p50, color="grey", linestyle=":", label="floor p50")
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms, log scale)")
    ax.set_ylabel("share of requests")
    _save(fig, ax, "TTFT distribution, steady stream", path)


def rolling_hit_share(records: Sequence[RequestRecord], window: int) -> list[float]:
    hits = [1.0 if r.hit else 0.0 for r in records]
    return [
        sum(hits[max(0, i - window + 1) : i + 1]) / min(window, i + 1) for i in range(len(hits))
    ]


def plot_hit_rate(results: SuiteResults, path: Path, window: int = 20) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    boundary = 0
    for i, s in enumerate(results.strategies.values()):
        steady = s.steady.requests
        restart = s.restart.requests if s.restart else []
        boundary = len(steady)
        shares = rolling_hit_share([*steady, *restart], window)
        _plot_line(ax, i, s, range(len(shares)), shares)
    if boundary:
        ax.axvline(boundary, color="grey", linestyle=":", label="restart")
    ax.set_xlabel("request")
    ax.set_ylabel(f"warm hit share (last {window})")
    ax.set_ylim(-0.02, 1.02)
    _save(fig, ax, "Hit share over time: steady stream, then restart", path)


def plot_after_change(results: SuiteResults, path: Path) -> None:
    sizes = sorted({c.k for s in results.strategies.values() for c in s.changes})
    fig, axes = plt.subplots(1, max(1, len(sizes)), figsize=(4 * max(1, len(sizes)), 4))
    axes_list = list(axes) if len(sizes) > 1 else [axes]
    for ax, k in zip(axes_list, sizes, strict=False):
        for s in results.strategies.values():
            change = next((c for c in s.change if c.k == k), None)
            if change:
                ax.plot(
                    [r.t_s for r in change.requests],
                    [r.ttft_ms for r in change.requests],
                    marker="o",
                    linestyle="",
                    markersize=4,
                    label=s.strategy,
                )
        ax.set_title(f"{k} changed document{'s' if k > 1 else ''}")
        ax.set_xlabel("seconds after the ingest began")
        ax.set_ylabel("TTFT (ms)")
        ax.grid(alpha=0.3)
    axes_list[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
