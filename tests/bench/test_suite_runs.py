"""The suite run end to end through ``bench.suite.main``, the entry point of ``python -m
bench`` and ``make bench``: its smallest section measures real numbers, and a section that
fails (or a Ctrl-C, or SIGTERM) ends the command non-zero, naming the section, after the report.

The scale section is the one that needs no vLLM; here it runs with a plan smaller than
``--quick``'s (``TINY``: the same steps, fewer towns and points) so the test takes seconds.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import bench.scale
import bench.suite
from bench.scale import Plan
from bench.scale_records import ScaleResult
from bench.suite import main

TINY = Plan(
    towns=8,
    queries=20,
    chunk_sizes=[200, 2_000],
    triple_sizes=[1_000],
    questions=20,
    entry_sizes=[100],
    detection_rounds=3,
    multihop_worlds=5,
    entity_sizes=[],  # drawn like the real entities: the corpus's extraction, 15 s
    startup_sizes=[],  # needs a vLLM: tests/bench/test_scale_startup.py uses the session's
)


def saved(out: Path) -> tuple[dict[str, Any], str]:
    """The one run's results.json and report.md under ``out``."""
    (run,) = out.iterdir()
    return json.loads((run / "results.json").read_text()), (run / "report.md").read_text()


def test_the_scale_section_measures_retrieval_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real ingest, the KB's real read path on a grown collection, the graph and detection;
    only the sizes are ``TINY``'s. Retrieval must return 3 passages (the section asserts it)
    and put the question's own town first nearly always."""
    monkeypatch.setattr(bench.scale, "plan", lambda quick: TINY)
    main(["--quick", "--only", "scale", "--out", str(tmp_path)])  # no SystemExit: all ran
    results, report = saved(tmp_path)
    scale = results["scale"]
    assert scale["ingest"]["chunks"] >= 3 * TINY.towns
    assert [r["chunks"] for r in scale["retrieval"]] == TINY.chunk_sizes
    for row in scale["retrieval"]:
        assert row["queries"] == TINY.queries
        assert 0 < row["p50_ms"] <= row["p95_ms"]
        assert row["top1_own_town_share"] >= 0.8
        # On the embedded default's index, reopened as at a restart, in its own process.
        assert row["recall_at_10"] >= 0.9 and row["open_s"] > 0 and row["index_rss_mib"] > 0
    assert [r["triples"] for r in scale["subgraph"]] == [999]  # the generator's own count
    assert all(r["p50_ms"] > 0 for r in scale["subgraph"])
    assert [r["entries"] for r in scale["detection"]] == TINY.entry_sizes
    assert "failed_sections" not in results["meta"]
    assert "Failed sections" not in report and "| 2000 |" in report


def broken_scale(quick: bool, work: Path, log: object = None) -> ScaleResult:
    raise RuntimeError("injected: retrieval returned nothing")


def test_a_failed_section_ends_the_run_non_zero_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The failure is injected: ``run_scale`` is replaced by a function that raises. The
    next section still runs (here a stand-in that records it was called), the report names
    the failure, and the command exits 1 with the section on stderr."""
    ran: list[str] = []
    monkeypatch.setattr(bench.suite, "run_scale", broken_scale)
    monkeypatch.setitem(bench.suite.SECTION_STEPS, "index", lambda run: ran.append("index"))
    with pytest.raises(SystemExit) as exit_:
        main(["--quick", "--only", "scale,index", "--out", str(tmp_path)])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "section scale failed: RuntimeError: injected" in err
    assert "failed section(s): scale" in err
    assert ran == ["index"]
    results, report = saved(tmp_path)
    (failure,) = results["meta"]["failed_sections"]
    assert failure["section"] == "scale" and "injected" in failure["error"]
    assert "broken_scale" in failure["traceback"]
    assert "failed: scale: partial results" in report
    assert "- **scale**: `RuntimeError: injected" in report


def assert_interrupted_in_scale(
    section: Callable[..., ScaleResult],
    code: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``section`` stands in for the scale section and interrupts the run: the sections
    after it do not run, the command exits ``code`` naming it, after the report."""
    ran: list[str] = []
    monkeypatch.setattr(bench.suite, "run_scale", section)
    monkeypatch.setitem(bench.suite.SECTION_STEPS, "index", lambda run: ran.append("index"))
    with pytest.raises(SystemExit) as exit_:
        main(["--quick", "--only", "scale,index", "--out", str(tmp_path)])
    assert exit_.value.code == code
    assert "interrupted in scale" in capsys.readouterr().err
    assert ran == []
    results, report = saved(tmp_path)
    assert results["meta"]["interrupted_in"] == "scale"
    assert "interrupted in scale: partial results" in report


def test_ctrl_c_ends_the_run_with_130_after_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C is injected as a ``KeyboardInterrupt`` raised by the scale section."""

    def interrupted(quick: bool, work: Path, log: object = None) -> ScaleResult:
        raise KeyboardInterrupt

    assert_interrupted_in_scale(interrupted, 130, tmp_path, monkeypatch, capsys)


def test_sigterm_ends_the_run_with_143_after_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real SIGTERM, sent to this process by the scale section itself, as a job
    runner's time limit sends one: the report of what was measured is written, the work
    folder removed, and the run exits 143."""
    work: list[Path] = []

    def stopped(quick: bool, work_dir: Path, log: object = None) -> ScaleResult:
        work.append(work_dir.parent)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not stop the section")

    assert_interrupted_in_scale(stopped, 143, tmp_path, monkeypatch, capsys)
    assert not work[0].exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
