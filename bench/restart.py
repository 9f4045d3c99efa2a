"""The cold start after a restart: the first requests once the service is ready again.

Both cases serve the same Zipf traffic, then restart (service stopped, vLLM's prefix
cache emptied as a restarted vLLM's would be, service started on the same data folder)
and serve the next requests of the same stream:

- ``caching only``: prefix caching on, no warmup; the cache starts empty.
- ``knowledge-aware``: warmrag re-warms the hottest registry entries before ``/ready``.

    .venv/bin/python bench/restart.py --towns 40 --before 150 --after 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    add_common_args,
    bench_dir,
    reset_prefix_cache,
    service,
    summary,
    vllm,
)
from bench.warmup_zipf import BLOCK
from bench.workload import towns, zipf_stream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--towns", type=int, default=40)
    parser.add_argument("--before", type=int, default=150, help="requests before the restart")
    parser.add_argument("--after", type=int, default=100, help="requests measured after it")
    add_common_args(parser)
    args = parser.parse_args()

    corpus = towns(args.towns)
    docs = [d for t in corpus for d in t.documents()]
    stream = zipf_stream([q for t in corpus for q in t.questions()], args.before + args.after)
    before, after = stream[: args.before], stream[args.before :]

    results: dict[str, dict[str, Any]] = {}
    with bench_dir() as work, vllm(args, work) as url:
        for name, warmup in (("caching only", False), ("knowledge-aware", True)):
            data = work / name.replace(" ", "-")
            reset_prefix_cache(url)
            with service(url, data, warmup_enabled=warmup) as svc:
                svc.post("/admin/documents", {"documents": docs}, admin=True)
                for question in before:
                    svc.chat(question)
                if warmup:
                    svc.post("/admin/warmup", None, admin=True)  # warm what became hot
            reset_prefix_cache(url)  # vLLM restarted: its cache is empty
            started = time.perf_counter()
            with service(url, data, warmup_enabled=warmup) as svc:
                ready_s = time.perf_counter() - started
                ttft, hits = [], 0
                for question in after:
                    body = svc.chat(question)
                    ttft.append(body["timings"]["ttft_ms"])
                    hits += body["cache"]["cached_tokens"] >= BLOCK
                entries = 0
                if warmup:
                    registry = svc.client.get("/admin/warmup", headers=svc.admin).json()
                    entries = len(registry["entries"])
            results[name] = {
                "ttft": ttft,
                "hits": hits / len(after),
                "ready_s": ready_s,
                "entries": entries,
            }

    print(
        f"{len(docs)} documents; {len(before)} requests before the restart, "
        f"{len(after)} measured after it"
    )
    for name, r in results.items():
        print(
            f"\n{name}: ready {r['ready_s']:.1f} s after start"
            + (f" ({r['entries']} entries re-warmed)" if r["entries"] else "")
        )
        print(f"  hit share {r['hits']:.1%}; TTFT (ms) {summary(r['ttft'])}")
    base, ours = results["caching only"]["ttft"], results["knowledge-aware"]["ttft"]
    print(
        f"\nTTFT p50 caching-only/aware: {statistics.median(base) / statistics.median(ours):.2f}x"
    )


if __name__ == "__main__":
    main()
