"""Zipf workload, side by side from a reset prefix cache: no warmup vs knowledge-aware.

- ``caching only``: vLLM prefix caching on, no warmup (plain llama-index + vLLM);
  a context hits only once somebody has asked it before.
- ``knowledge-aware``: after ingest, warmrag warms the context of a question each
  document predicts (its first sentence) within the KV budget, then the stream runs.

A request "hits" when vLLM served at least one full KV block of it from cache.

    .venv/bin/python bench/warmup_zipf.py --towns 40 --requests 150
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    add_common_args,
    bench_dir,
    percentile,
    reset_prefix_cache,
    service,
    summary,
    vllm,
)
from bench.workload import towns, zipf_stream

BLOCK = 128


def run(svc: Any, stream: list[str]) -> dict[str, Any]:
    ttft, hits = [], 0
    for question in stream:
        body = svc.chat(question)
        ttft.append(body["timings"]["ttft_ms"])
        hits += body["cache"]["cached_tokens"] >= BLOCK
    return {"ttft": ttft, "hit_rate": hits / len(stream)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--towns", type=int, default=40)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--zipf-s", type=float, default=1.1)
    add_common_args(parser)
    args = parser.parse_args()

    corpus = towns(args.towns)
    docs = [d for t in corpus for d in t.documents()]
    questions = [q for t in corpus for q in t.questions()]
    stream = zipf_stream(questions, args.requests, args.zipf_s)
    print(
        f"{len(docs)} documents, {len(questions)} questions, {len(stream)} requests "
        f"(Zipf s={args.zipf_s}, {len({q.lower() for q in stream})} distinct spellings)"
    )

    results: dict[str, dict[str, Any]] = {}
    with bench_dir() as work, vllm(args, work) as url:
        with service(url, work / "plain", warmup_enabled=False) as svc:
            svc.post("/admin/documents", {"documents": docs}, admin=True)
            reset_prefix_cache(url)
            results["caching only"] = run(svc, stream)

        reset_prefix_cache(url)
        with service(url, work / "aware", warmup_document_queries=True) as svc:
            svc.post("/admin/documents", {"documents": docs}, admin=True)
            reports = svc.post("/admin/warmup", None, admin=True)
            registry = svc.client.get("/admin/warmup", headers=svc.admin).json()
            warm = run(svc, stream)
            warm["prefill_tokens"] = sum(r["prefill_tokens"] for r in reports)
            warm["entries"] = len(registry["entries"])
            warm["warm_tokens"] = registry["warm_tokens"]
            warm["budget"] = registry["budget"]["max_tokens"]
            results["knowledge-aware"] = warm

    for name, r in results.items():
        print(f"\n{name}: hit rate {r['hit_rate']:.1%}")
        print(f"  TTFT (ms) {summary(r['ttft'])}")
        if "entries" in r:
            print(
                f"  warmed {r['entries']} prefixes, {r['warm_tokens']} tokens "
                f"(budget {r['budget']}), warmup prefill tokens {r['prefill_tokens']}"
            )
    base, aware = results["caching only"]["ttft"], results["knowledge-aware"]["ttft"]
    p50 = statistics.median(base) / statistics.median(aware)
    p99 = percentile(base, 99) / percentile(aware, 99)
    print(f"\np50 ratio caching-only/aware: {p50:.2f}x; p99 ratio: {p99:.2f}x")


if __name__ == "__main__":
    main()
