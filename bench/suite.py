"""The whole benchmark suite: ``make bench`` (full, about two hours here) or
``make bench BENCH_ARGS=--quick`` (a few minutes: a small workload, the scale and main
sections only; ``--quick --only scale,index,main,no-cache,pressure,real`` runs them all).

Order: scale and the embedded vector indexes (no vLLM running), then on one vLLM with
prefix caching the floor and strategies 1-5, then strategy 0 on a vLLM without prefix
caching, then the pressure runs on a vLLM with a 1 GiB KV cache, then the real corpus
(Git's documentation, realistic contexts: ``bench.real_section``) on a vLLM of its own.
Every vLLM is a child started here, one at a time; ``--vllm-url`` points the main and
real-corpus runs at another vLLM instead (it needs ``VLLM_SERVER_DEV_MODE=1``), and the
runs that need their own vLLM are then skipped unless ``--vllm-url-no-cache`` /
``--vllm-url-small`` name one.

Results go to ``bench/results/<timestamp>/``: results.json, report.md, PNG plots.
A section that raises is recorded there and the next section runs; the command then exits 1
naming the failed sections on stderr (130 after a Ctrl-C, which stops the run).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from bench.embedded_index import run_embedded_index
from bench.harness import vllm
from bench.machine import this_machine
from bench.paths import INTERRUPTED_STATUS, REPO, STOPPED_STATUS, Stopped, bench_dir
from bench.pressure import PRESSURE_KV_GIB, run_pressure
from bench.real_records import RealResult
from bench.real_section import run_ingest_rate, run_real
from bench.report import write_report
from bench.scale import run_scale
from bench.scenario_records import ScenarioConfig, Skipped
from bench.scenarios import build_template, measure_floor, run_strategy
from bench.strategies import STRATEGIES
from bench.suite_records import RunMeta, SectionFailure, SuiteResults
from bench.workload import Workload, WorkloadSpec
from rag.knowledge.models import EmbeddingPrecision

SECTIONS = ("scale", "index", "main", "no-cache", "pressure", "real")
#: The real corpus's vLLM: its ~1.3k-token contexts for ~100 asked sections need a larger
#: cache than the towns' (at float32, 12 GiB hold ~280k tokens; the warm budget's tier
#: for 4-16 GiB is 30% of it, ~64 contexts).
REAL_KV_GIB = 12
#: Embedded vector-index sizes (chunks) measured by the "index" section.
#: Qdrant Edge builds its HNSW index at ~2.7 ms a point here (100k: 4.5 min); 1M would
#: take about an hour, so the suite stops at 100k.
INDEX_SIZES = (10_000, 100_000)
QUICK_INDEX_SIZES = (10_000,)
# Strategy 0 and the pressure runs each need a vLLM of their own (about a minute to
# start here); the quick run keeps to the one the strategies share.
QUICK_SECTIONS = ("scale", "main")


def log(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workload, a few minutes")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--vllm-url", help="main vLLM (prefix caching on, dev mode)")
    parser.add_argument("--vllm-url-no-cache", help="vLLM with prefix caching off (strategy 0)")
    parser.add_argument("--vllm-url-small", help=f"vLLM with a {PRESSURE_KV_GIB} GiB KV cache")
    parser.add_argument("--kv-cache-gib", type=int, default=4, help="main vLLM's KV cache")
    parser.add_argument(
        "--enforce-eager",
        action="store_true",
        help="vLLM children skip compilation (default with --quick): faster start, slower TTFT",
    )
    parser.add_argument(
        "--only",
        help="comma-separated sections to run, of " + ",".join(SECTIONS) + " (default: all; "
        "with --quick " + ",".join(QUICK_SECTIONS) + ", which need one vLLM start, not three)",
    )
    args = parser.parse_args(argv)
    if args.only is None:
        args.only = ",".join(QUICK_SECTIONS if args.quick else SECTIONS)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        known = ", ".join(SECTIONS)
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; known: {known}")
    return args


@contextmanager
def vllm_for(
    url: str | None, eager: bool, kv_cache_gib: int, prefix_caching: bool = True
) -> Iterator[str]:
    """``url`` where one was given, else a vLLM child started for the section."""
    if url:
        yield url
    else:
        with vllm(
            enforce_eager=eager, log=log, kv_cache_gib=kv_cache_gib, prefix_caching=prefix_caching
        ) as started:
            yield started


@dataclass(frozen=True)
class SectionRun:
    """What every section reads and where it writes its results (its own key of ``results``)."""

    args: argparse.Namespace
    results: SuiteResults
    workload: Workload
    config: ScenarioConfig
    work: Path

    @property
    def eager(self) -> bool:
        return bool(self.args.enforce_eager or self.args.quick)

    @property
    def template(self) -> Path:
        """The ingested corpus the main section builds and strategy 0 reuses."""
        return self.work / "corpus"


@dataclass(frozen=True)
class SectionsOutcome:
    """How the sections went: the ones that failed, and the one a Ctrl-C or SIGTERM
    stopped (if any), with the status that ends the run (``interrupt_status``)."""

    failed: list[SectionFailure] = field(default_factory=list)
    interrupted_in: str | None = None
    interrupted_status: int = INTERRUPTED_STATUS


#: Ctrl-C, and SIGTERM inside ``bench_dir`` (``bench.paths.stop_raises``): both stop the
#: run where it is and still write the report of what was measured.
INTERRUPTS = (KeyboardInterrupt, Stopped)


def interrupt_status(exc: BaseException) -> int:
    """The status a run stopped by ``exc`` ends with, as a shell reports the signal."""
    return STOPPED_STATUS if isinstance(exc, Stopped) else INTERRUPTED_STATUS


def scale_section(run: SectionRun) -> None:
    log("scale: ingest, retrieval, subgraph, detection")
    run.results.scale = run_scale(run.args.quick, run.work / "scale", log=log)


def index_section(run: SectionRun) -> None:
    sizes = QUICK_INDEX_SIZES if run.args.quick else INDEX_SIZES
    log(f"index: embedded vector stores at {', '.join(map(str, sizes))} chunks")
    run.results.embedded_index = run_embedded_index(list(sizes), run.work / "index", log)


def main_section(run: SectionRun) -> None:
    """The floor and strategies 1-5 on one vLLM with prefix caching."""
    args, results = run.args, run.results
    with vllm_for(args.vllm_url, run.eager, kv_cache_gib=args.kv_cache_gib) as url:
        log("floor: questions with no context")
        results.floor = measure_floor(url, run.workload, run.config)
        results.corpus_ingest = build_template(url, run.template, run.workload, log)
        for strategy in (s for s in STRATEGIES if s.prefix_caching):
            log(f"strategy {strategy.label}")
            results.strategies[strategy.slug] = run_strategy(
                strategy, url, run.work, run.workload, run.config, log, template=run.template
            )


def no_cache_section(run: SectionRun) -> None:
    """Strategy 0 on a vLLM without prefix caching."""
    args = run.args
    if args.vllm_url and not args.vllm_url_no_cache:
        log("strategy 0 skipped: no --vllm-url-no-cache")
        return
    with vllm_for(
        args.vllm_url_no_cache, run.eager, kv_cache_gib=args.kv_cache_gib, prefix_caching=False
    ) as url:
        for strategy in (s for s in STRATEGIES if not s.prefix_caching):
            log(f"strategy {strategy.label}")
            run.results.strategies[strategy.slug] = run_strategy(
                strategy,
                url,
                run.work,
                run.workload,
                run.config,
                log,
                template=run.template if run.template.exists() else None,
                change=False,
            )


def pressure_section(run: SectionRun) -> None:
    run.results.pressure = run_pressure(
        run.args, run.eager, run.workload, run.config, run.work, vllm_for, log
    )


def real_section(run: SectionRun) -> None:
    """Git's documentation: the ingest rate first, with both cores free of vLLM."""
    rate, other = run_ingest_rate(run.args.quick, run.work, log)
    real = RealResult(ingest_rate=rate)
    if other.precision == EmbeddingPrecision.INT8:
        real.ingest_int8 = other
    else:
        real.ingest_float32 = other
    run.results.real = real
    with vllm_for(run.args.vllm_url, run.eager, kv_cache_gib=REAL_KV_GIB) as url:
        run_real(url, run.work, run.args.quick, log, real)


#: Each section's function, in the order the suite runs them (``SECTIONS``).
SECTION_STEPS: dict[str, Callable[[SectionRun], None]] = {
    "scale": scale_section,
    "index": index_section,
    "main": main_section,
    "no-cache": no_cache_section,
    "pressure": pressure_section,
    "real": real_section,
}


def run_sections(run: SectionRun) -> SectionsOutcome:
    """Run the selected sections in order (a section's entry appears once it is done).

    A section that raises is recorded and the next one runs: a failure late in a two-hour
    run must not lose the sections around it. Ctrl-C or SIGTERM stops the run where it is."""
    selected = set(run.args.only.split(","))
    if "pressure" not in selected:
        run.results.pressure = Skipped(skipped=f"not among the sections run ({run.args.only})")
    failed: list[SectionFailure] = []
    for name in (s for s in SECTIONS if s in selected):
        try:
            SECTION_STEPS[name](run)
        except INTERRUPTS as exc:
            return SectionsOutcome(failed, name, interrupt_status(exc))
        except Exception as exc:
            error = "".join(traceback.format_exception_only(exc)).strip()
            failed.append(
                SectionFailure(section=name, error=error, traceback=traceback.format_exc())
            )
            log(f"{name}: failed: {error}; going on with the next section")
            traceback.print_exc()
    return SectionsOutcome(failed)


def source_commit() -> str:
    """The commit the suite ran from (``+changes`` when the tree had uncommitted edits)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return commit + ("+changes" if dirty else "")


@dataclass(frozen=True)
class RunOutcome:
    """Where the report went and what went wrong (``main`` turns it into the exit status)."""

    out: Path
    failed: list[SectionFailure]
    interrupted_in: str | None  # a section, "setup" or "clean-up"; None: not interrupted
    interrupted_status: int = INTERRUPTED_STATUS


def run(args: argparse.Namespace) -> RunOutcome:
    spec = WorkloadSpec.quick() if args.quick else WorkloadSpec.full()
    config = ScenarioConfig.quick() if args.quick else ScenarioConfig()
    eager = args.enforce_eager or args.quick
    workload = Workload(spec)
    machine = this_machine(eager)
    started = time.perf_counter()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    meta = RunMeta(
        started=stamp,
        quick=args.quick,
        command="make bench" + (" BENCH_ARGS=--quick" if args.quick else ""),
        argv=shlex.join(sys.argv[1:]),
        machine=machine.summary,
        machine_facts=machine,
        corpus=f"{len(workload.towns) * 3} documents, {len(workload.questions)} distinct "
        f"questions, {spec.steady_requests} steady + {spec.restart_requests} "
        f"after-restart requests, Zipf s={spec.zipf_s}",
        commit=source_commit(),
        workload=spec,
        scenarios=config,
    )
    results = SuiteResults(meta=meta, strategies={})
    log(f"workload: {meta.corpus}")
    outcome = SectionsOutcome(interrupted_in="setup")
    try:
        with bench_dir() as work:
            outcome = run_sections(SectionRun(args, results, workload, config, work))
    except INTERRUPTS as exc:  # in the work folder's set-up or clean-up, between sections
        outcome = replace(
            outcome,
            interrupted_in=outcome.interrupted_in or "clean-up",
            interrupted_status=interrupt_status(exc),
        )
    record_outcome(meta, outcome)
    results.strategies = dict(sorted(results.strategies.items()))
    meta.duration_s = round(time.perf_counter() - started, 1)
    out = args.out / stamp
    for path in write_report(results, out):
        log(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return RunOutcome(out, outcome.failed, outcome.interrupted_in, outcome.interrupted_status)


def record_outcome(meta: RunMeta, outcome: SectionsOutcome) -> None:
    """Put the failed sections and an interruption in the results, for the report to show."""
    if outcome.interrupted_in:
        meta.interrupted = True
        meta.interrupted_in = outcome.interrupted_in
        log(f"interrupted in {outcome.interrupted_in}: writing the report of what was measured")
    if outcome.failed:
        meta.failed_sections = list(outcome.failed)
        log(f"failed: {', '.join(f.section for f in outcome.failed)}; writing the report")


def exit_status(outcome: RunOutcome) -> int:
    """0 only for a run whose every section completed; the failures go to stderr, by
    section, so ``make bench`` fails loudly instead of reporting."""
    for failure in outcome.failed:
        print(
            f"python -m bench: section {failure.section} failed: {failure.error}", file=sys.stderr
        )
    if outcome.interrupted_in:
        print(f"python -m bench: interrupted in {outcome.interrupted_in}", file=sys.stderr)
        return outcome.interrupted_status
    if outcome.failed:
        names = ", ".join(f.section for f in outcome.failed)
        print(f"python -m bench: failed section(s): {names}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    outcome = run(parse_args(argv))
    print(f"\nreport: {outcome.out / 'report.md'}")
    status = exit_status(outcome)
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    main()
