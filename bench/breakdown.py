"""Where a chat's first-token time goes, for hits and misses.

Each question is asked once, alone, through the streaming OpenAI route, as a client
would: the client's own TTFT, then the service's parts (``timings``: retrieval, prompt,
the request to vLLM until its first token) and vLLM's own (its ``/metrics`` histograms
read before and after the request: queue, prefill, vLLM-side TTFT). What is left is
glue: the HTTP hop and JSON from the client to warmrag (client - service TTFT) and from
warmrag to vLLM (warmrag's LLM TTFT - vLLM's TTFT). A sample during which vLLM served
any other request (a warmup prefill) is marked and left out of the medians: its
histogram deltas are not its own.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import Service
from bench.measure import is_hit

#: vLLM's per-request histograms (seconds), by the part they time.
VLLM_PARTS = {
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "vllm_ttft": "vllm:time_to_first_token_seconds",
}


def vllm_sums(vllm_url: str) -> dict[str, float]:
    """Sum and count of each histogram in ``VLLM_PARTS`` (summed over engines)."""
    text = httpx.get(f"{vllm_url}/metrics", timeout=10).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for part, name in VLLM_PARTS.items():
                if sample.name in (f"{name}_sum", f"{name}_count"):
                    key = part + ("_count" if sample.name.endswith("_count") else "")
                    found[key] = found.get(key, 0.0) + float(sample.value)
    return found


def ask_streaming(svc: Service, question: str) -> tuple[float, dict[str, Any]]:
    """Client TTFT (ms) of a streamed chat, and the ``warmrag`` fields of its last chunk."""
    body = {"messages": [{"role": "user", "content": question}], "stream": True}
    started = time.perf_counter()
    first: float | None = None
    extra: dict[str, Any] = {}
    with svc.client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if first is None and any(c.get("delta", {}).get("content") for c in choices):
                first = (time.perf_counter() - started) * 1000
            extra = chunk.get("warmrag") or extra
    end = (time.perf_counter() - started) * 1000
    return (first if first is not None else end), extra


def measure(svc: Service, vllm_url: str, questions: Sequence[str]) -> list[dict[str, Any]]:
    """One row per question asked (see the module doc)."""
    rows = []
    for question in questions:
        before = vllm_sums(vllm_url)
        client_ms, fields = ask_streaming(svc, question)
        after = vllm_sums(vllm_url)
        timings, cache = fields["timings"], fields["cache"]
        row = {
            "question": question,
            # False: vLLM served something else meanwhile; its deltas are not this request's.
            "alone": after.get("queue_count", 0) - before.get("queue_count", 0) == 1,
            "client_ttft_ms": round(client_ms, 2),
            **{k: timings[k] for k in ("ttft_ms", "retrieval_ms", "prompt_ms", "llm_ttft_ms")},
            "context_reused": timings["context_reused"],
            "prompt_tokens": cache["prompt_tokens"],
            "cached_tokens": cache["cached_tokens"],
            "prefix_tokens": cache.get("prefix_tokens"),
            "warm_hit": cache["warm_hit"],
        }
        for part in VLLM_PARTS:
            row[f"{part}_ms"] = round((after.get(part, 0) - before.get(part, 0)) * 1000, 2)
        row["hop_ms"] = round(row["client_ttft_ms"] - row["ttft_ms"], 2)
        row["to_vllm_ms"] = round(row["llm_ttft_ms"] - row["vllm_ttft_ms"], 2)
        rows.append(row)
    return rows


PARTS = (
    "client_ttft_ms",
    "hop_ms",
    "retrieval_ms",
    "prompt_ms",
    "to_vllm_ms",
    "queue_ms",
    "prefill_ms",
    "vllm_ttft_ms",
    "prompt_tokens",
    "cached_tokens",
)


def summarize_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The median of each part over the requests vLLM served alone (all of them where
    none was), and how many were warm hits / reused contexts."""
    rows = [r for r in rows if r["alone"]] or list(rows)
    if not rows:
        return {"n": 0}
    return {
        "n": len(rows),
        "hits": sum(
            1 for r in rows if is_hit(r["prompt_tokens"], r["cached_tokens"], r["prefix_tokens"])
        ),
        "reused": sum(1 for r in rows if r["context_reused"]),
        "median": {p: round(statistics.median(r[p] for r in rows), 2) for p in PARTS},
    }
