"""TTFT through ``POST /v1/chat``, cold vs after warming the context's prefix.

For each of N contexts, side by side in one run against one vLLM:
- cold: vLLM's prefix cache reset, then the chat;
- warm: prefix cache reset, the context's warm prefix prefilled (the same prompt
  builder chat uses), then the chat;
- floor: the question alone sent to vLLM with no context (what a warm prefix can
  at best approach).

    .venv/bin/python bench/ttft_warm_vs_cold.py --contexts 12
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    MODEL_NAME,
    add_common_args,
    bench_dir,
    reset_prefix_cache,
    service,
    summary,
    vllm,
)
from bench.workload import towns
from rag.llm import TextDelta, VLLMClient


async def floor_ttft(url: str, question: str) -> float:
    client = VLLMClient(url, MODEL_NAME)
    try:
        started = time.perf_counter()
        async for event in client.stream_chat(
            [{"role": "user", "content": question}], max_tokens=8, temperature=0.0
        ):
            if isinstance(event, TextDelta):
                return (time.perf_counter() - started) * 1000
        return (time.perf_counter() - started) * 1000
    finally:
        await client.aclose()


async def prefill(url: str, messages: list[dict[str, str]]) -> int:
    client = VLLMClient(url, MODEL_NAME)
    try:
        return (await client.prefill(messages)).prompt_tokens
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=12)
    add_common_args(parser)
    args = parser.parse_args()

    sample = towns(args.contexts)
    cold, warm, floor, prefix_tokens, cached = [], [], [], [], []
    with (
        bench_dir() as work,
        vllm(args, work) as url,
        service(url, work / "data", warmup_enabled=False) as svc,
    ):
        docs = [d for town in sample for d in town.documents()]
        svc.post("/admin/documents", {"documents": docs}, admin=True)
        runtime = svc.server.runtime
        for town in sample:
            question = town.questions()[1]
            reset_prefix_cache(url)
            body = svc.chat(question)
            cold.append(body["timings"]["ttft_ms"])

            reset_prefix_cache(url)
            retrieval = runtime.retriever.retrieve(question, 3)
            prefix = runtime.builder.prefix(retrieval.passages, retrieval.triples)
            prefix_tokens.append(asyncio.run(prefill(url, list(prefix.messages))))
            body = svc.chat(question)
            warm.append(body["timings"]["ttft_ms"])
            cached.append(body["cache"]["cached_tokens"])

            reset_prefix_cache(url)
            floor.append(asyncio.run(floor_ttft(url, question)))

    print(f"contexts: {len(sample)}, prefix tokens p50 {statistics.median(prefix_tokens):.0f}")
    print(f"cached tokens on the warm chat: p50 {statistics.median(cached):.0f}")
    print(f"TTFT cold  (ms) {summary(cold)}")
    print(f"TTFT warm  (ms) {summary(warm)}")
    print(f"TTFT floor (ms) {summary(floor)}   (question only, straight to vLLM)")
    ratio = statistics.median(cold) / statistics.median(warm)
    print(
        f"cold/warm p50 ratio: {ratio:.2f}x; warm/floor p50: "
        f"{statistics.median(warm) / statistics.median(floor):.2f}x"
    )


if __name__ == "__main__":
    main()
