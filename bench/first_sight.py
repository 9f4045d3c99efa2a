"""First sight: how much of a never-asked question's context is already in vLLM's cache.

Git's documentation (the real corpus, one document per section) ingested over HTTP
into a fresh service per arm, the detection it triggers run (one warm cycle: with
document queries on, each document's predicted questions are warmed within the
budget), then each of the corpus's asked questions sent once: every one a first
sight. The measure is vLLM's ``cached_tokens`` over the request's context tokens
(its prefix), and the share of warm hits. Arms, side by side on one vLLM, each from
an emptied cache:

- ``none``: no predicted questions (the default before this measure);
- ``first_sentence``: each new document's first sentence;
- ``headings``: each new document's title and section headings.

The corpus's questions are themselves written from its section headings
(``bench.real_corpus.question_for``), so ``headings`` is measured on questions close
to what it predicts: an upper bound for documentation whose readers ask otherwise.

    python -m bench.first_sight [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import reset_prefix_cache, service, vllm
from bench.machine import Machine, this_machine
from bench.paths import bench_dir
from bench.real_corpus import RealWorkload
from bench.real_records import RealSpec
from bench.record import Record
from bench.strategies import Overrides
from rag.chat.query import normalize_query

#: The real section's cache (float32: ~280k tokens; the 30 % tier holds ~64 contexts).
KV_GIB = 12
ARMS: dict[str, Overrides] = {
    "none": Overrides(warmup_document_queries=False),
    "first_sentence": Overrides(
        warmup_document_queries=True, warmup_document_query_source="first_sentence"
    ),
    "headings": Overrides(warmup_document_queries=True, warmup_document_query_source="headings"),
}


class ArmResult(Record):
    questions: int
    warm_entries: int
    warm_prefill_tokens: int
    warm_s: float
    hits: int
    #: Mean over requests of cached tokens / context (prefix) tokens.
    context_cached_share: float
    #: All requests' cached context tokens over all their context tokens.
    context_cached_tokens_share: float


class FirstSightResult(Record):
    machine: Machine
    sections: int
    arms: dict[str, ArmResult]


def first_sight_questions(workload: RealWorkload, limit: int) -> list[str]:
    """Distinct asked questions, seeded: none asked before in the arm."""
    distinct = sorted({normalize_query(q): q for q in workload.questions}.values())
    return random.Random(13).sample(distinct, min(limit, len(distinct)))


def run_arm(url: str, data: Path, workload: RealWorkload, questions: list[str],
            overrides: Overrides) -> ArmResult:  # fmt: skip
    reset_prefix_cache(url)
    with service(url, data, **overrides) as svc:
        svc.ingest(workload.documents())
        started = time.perf_counter()
        svc.warm_cycle()  # detection of the ingest: with predictions, their warmup
        warm_s = time.perf_counter() - started
        registry = svc.registry()
        prefill = int(svc.metric("warmrag_warm_prefill_tokens_total"))
        shares, cached, context, hits = [], 0, 0, 0
        for question in questions:
            reply = svc.chat(question)
            prefix = reply.cache.prefix_tokens or reply.cache.prompt_tokens
            served = min(reply.cache.cached_tokens, prefix)
            shares.append(served / prefix if prefix else 0.0)
            cached, context = cached + served, context + prefix
            hits += int(reply.cache.warm_hit)
    return ArmResult(
        questions=len(questions),
        warm_entries=len(registry.entries),
        warm_prefill_tokens=prefill,
        warm_s=round(warm_s, 1),
        hits=hits,
        context_cached_share=round(statistics.fmean(shares), 3) if shares else 0.0,
        context_cached_tokens_share=round(cached / context, 3) if context else 0.0,
    )


def run(quick: bool, work: Path, log: Callable[[str], None] = print) -> FirstSightResult:
    spec = RealSpec.quick() if quick else RealSpec.full()
    workload = RealWorkload(spec)
    questions = first_sight_questions(workload, 20 if quick else 60)
    arms: dict[str, ArmResult] = {}
    with vllm(kv_cache_gib=KV_GIB, enforce_eager=True, log=log) as url:
        for name, overrides in ARMS.items():
            log(f"first sight: {name}")
            arms[name] = run_arm(url, work / name, workload, questions, overrides)
            log(f"  {name}: {arms[name].to_json()}")
    return FirstSightResult(machine=this_machine(True), sections=len(workload.towns), arms=arms)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="80 sections, 20 questions")
    parser.add_argument("--out", type=Path, default=None, help="write first_sight.json here")
    args = parser.parse_args(argv)
    try:
        with bench_dir("first-sight-") as work:
            result = run(args.quick, work)
    except Exception as exc:  # a failed benchmark exits non-zero
        print(f"first sight failed: {exc!r}", file=sys.stderr)
        raise SystemExit(1) from exc
    print(json.dumps(result.to_json(), indent=1))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "first_sight.json").write_text(json.dumps(result.to_json(), indent=1))


if __name__ == "__main__":
    main()
