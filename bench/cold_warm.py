"""Cold vs warm TTFT on the sample knowledge base: a quick check on one vLLM child.

For each question: reset vLLM's prefix cache and ask it (cold); reset again, seed the
question (warmup prefills its context) and ask another spelling of it (warm). Prints
each pair with its cached tokens, then the p50s next to the floor (the question alone,
straight to vLLM). The full comparison of strategies is ``make bench``.

    .venv/bin/python -m bench.cold_warm
"""

from __future__ import annotations

import statistics

from bench.harness import floor_ttft, reset_prefix_cache, service, vllm
from bench.paths import bench_dir

QUESTIONS = (
    "Who discovered polonium?",
    "Where was Marie Curie born?",
    "Who created Python?",
    "What is the capital of France?",
    "How does photosynthesis work?",
)


def main() -> None:
    with (
        vllm(enforce_eager=True) as url,
        bench_dir() as folder,
        service(url, folder, seed_sample_kb=True) as svc,
    ):
        cold: list[float] = []
        warm: list[float] = []
        hits = 0
        print("| question | prompt tokens | cold TTFT ms | warm cached tokens | warm TTFT ms |")
        print("|---|---:|---:|---:|---:|")
        for question in QUESTIONS:
            reset_prefix_cache(url)
            c = svc.chat(question)
            reset_prefix_cache(url)
            svc.seed([question])
            w = svc.chat(question + "?")  # another spelling: same key, same context
            cold.append(c.timings.ttft_ms)
            warm.append(w.timings.ttft_ms)
            hits += w.cache.warm_hit
            print(
                f"| {question} | {c.cache.prompt_tokens} | {cold[-1]:.0f} | "
                f"{w.cache.cached_tokens} | {warm[-1]:.0f} |"
            )
        floor = [floor_ttft(url, q) for q in QUESTIONS]
        print(
            f"cold p50 {statistics.median(cold):.0f} ms, warm p50 {statistics.median(warm):.0f} ms,"
            f" floor p50 {statistics.median(floor):.0f} ms; warm hits {hits}/{len(QUESTIONS)}"
        )


if __name__ == "__main__":
    main()
