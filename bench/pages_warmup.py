"""Warmup on real pages with the default settings: does it engage?

Git's documentation as the 46 Markdown pages a team's documentation looks like
(``bench.chunking_quality.pages_of``), ingested over HTTP. Small-to-big windows make
their contexts 1,000-2,000 tokens, the size that a per-entry share of a quarter of
the window (1,024 tokens) silently dropped. Two paths, each from an emptied cache:

- **seed**: ``POST /admin/warmup/queries`` with questions, then each asked in another
  spelling (same query key, so the same context);
- **hot**: other questions asked once each (cold), the prefix cache emptied (what plain
  caching kept is gone), one warm cycle, then each asked again in another spelling.

A chat counts as warm when the service says ``warm_hit`` (``warmup.hits``); the cached
share is vLLM's ``cached_tokens`` over the prompt's tokens.

    python -m bench.pages_warmup [--questions 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from bench.chunking_quality import pages_of
from bench.harness import Service, reset_prefix_cache, service, vllm
from bench.machine import this_machine
from bench.paths import bench_dir
from bench.real_corpus import ensure_package, load_sections
from bench.record import Record
from bench.workload import paraphrase
from warmup.reports import CycleReport


class PathResult(Record):
    """One warmup path (seed or hot) over its questions."""

    questions: int
    warm_requests: int
    entries: int
    warm_hits: int
    cached_share_mean: float
    prompt_tokens: list[int]
    states: dict[str, int]
    declined: dict[str, int]

    @property
    def warm_share(self) -> float:
        return self.warm_hits / self.questions if self.questions else 0.0


class PagesResult(Record):
    """What ``--out`` writes (``pages_warmup.json``)."""

    machine: str
    pages: int
    ingest_s: float
    per_entry_max_tokens: int | None
    seed: PathResult
    hot: PathResult


def _questions(count: int) -> tuple[list[str], list[str]]:
    """Two disjoint sets of section questions, drawn with a fixed seed."""
    asked = sorted({s.question for s in load_sections() if s.question})
    chosen = random.Random(7).sample(asked, 2 * count)
    return chosen[:count], chosen[count:]


def _ask_again(
    svc: Service, questions: list[str], reports: Iterable[CycleReport], entries: int
) -> PathResult:
    """Each question in another spelling: warm state, cached share, prompt size; with
    what the warmup ``reports`` did and the ``entries`` it added."""
    rng = random.Random(3)
    reports = list(reports)
    states: Counter[str] = Counter()
    declined: Counter[str] = Counter()
    for report in reports:
        declined.update({reason.value: count for reason, count in report.declined.items()})
    shares, prompt_tokens, hits = [], [], 0
    for question in questions:
        cache = svc.chat(paraphrase(question, rng)).cache
        states[cache.warm_state.value] += 1
        hits += cache.warm_hit
        prompt_tokens.append(cache.prompt_tokens)
        shares.append(cache.cached_tokens / max(1, cache.prompt_tokens))
    return PathResult(
        questions=len(questions),
        warm_requests=sum(r.warm_requests for r in reports),
        entries=entries,
        warm_hits=hits,
        cached_share_mean=round(statistics.fmean(shares), 3),
        prompt_tokens=prompt_tokens,
        states=dict(states),
        declined=dict(declined),
    )


def run(count: int, log: Callable[[str], None] = print) -> PagesResult:
    ensure_package()
    pages = pages_of(load_sections())
    seeded, hot_questions = _questions(count)
    with (
        vllm(enforce_eager=True, log=log) as url,
        bench_dir() as folder,
        service(url, folder / "data") as svc,
    ):
        started = time.perf_counter()
        documents = [p.document().model_dump() for p in pages]
        svc.ingest(documents, batch=8)
        ingest_s = time.perf_counter() - started
        log(f"ingested {len(pages)} pages in {ingest_s:.0f} s")
        svc.warm_cycle()  # the ingest's detection
        budget = svc.registry().budget

        reset_prefix_cache(url)
        report = svc.seed(seeded)
        entries = len(svc.registry().entries)
        seed = _ask_again(svc, seeded, [report], entries)
        log(f"seed: {seed.warm_requests} warmed, {seed.warm_hits}/{count} warm hits")

        for question in hot_questions:
            svc.chat(question)
        reset_prefix_cache(url)
        reports = svc.warm_cycle()
        added = len(svc.registry().entries) - entries
        hot = _ask_again(svc, hot_questions, reports, added)
        log(f"hot: {hot.warm_requests} warmed, {hot.warm_hits}/{count} warm hits")
    return PagesResult(
        machine=this_machine(enforce_eager=True).summary,
        pages=len(pages),
        ingest_s=round(ingest_s, 1),
        per_entry_max_tokens=budget.per_entry_max_tokens if budget else None,
        seed=seed,
        hot=hot,
    )


def summary(result: PagesResult) -> str:
    lines = [
        f"{result.pages} pages, per-entry share {result.per_entry_max_tokens} tokens; "
        f"{result.machine}",
        "| path | warmed | entries | warm hits | cached share | prompt tokens p50 (max) "
        "| states | declined |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for name, path in (("seed", result.seed), ("hot", result.hot)):
        tokens = path.prompt_tokens or [0]
        lines.append(
            f"| {name} | {path.warm_requests} | {path.entries} | {path.warm_hits}/"
            f"{path.questions} ({path.warm_share:.0%}) | {path.cached_share_mean:.2f} | "
            f"{statistics.median(tokens):.0f} ({max(tokens)}) | {path.states} | {path.declined} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20, help="per path (seed, hot)")
    parser.add_argument("--out", type=Path, default=None, help="write results.json here")
    args = parser.parse_args()
    result = run(args.questions)
    print(summary(result))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pages_warmup.json").write_text(json.dumps(result.to_json(), indent=1))


if __name__ == "__main__":
    main()
