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

import httpx
from prometheus_client.parser import text_string_to_metric_families

from api.schemas import WarmragFields
from bench.harness import Service
from bench.measure import is_hit
from bench.real_records import BreakdownMedian, BreakdownRow, BreakdownSummary

#: A row's fields as the service's ``timings`` and ``cache`` report them.
TIMINGS = {"ttft_ms", "retrieval_ms", "prompt_ms", "llm_ttft_ms", "context_reused"}
CACHE = {"prompt_tokens", "cached_tokens", "prefix_tokens", "warm_hit"}
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


def ask_streaming(svc: Service, question: str) -> tuple[float, WarmragFields]:
    """Client TTFT (ms) of a streamed chat, and the ``warmrag`` fields of its last chunk."""
    body = {"messages": [{"role": "user", "content": question}], "stream": True}
    started = time.perf_counter()
    first: float | None = None
    extra: object = None
    with svc.client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])  # an OpenAI chunk, with warmrag's fields on the last
            choices = chunk.get("choices") or []
            if first is None and any(c.get("delta", {}).get("content") for c in choices):
                first = (time.perf_counter() - started) * 1000
            extra = chunk.get("warmrag") or extra
    end = (time.perf_counter() - started) * 1000
    return (first if first is not None else end), WarmragFields.model_validate(extra)


def measure(svc: Service, vllm_url: str, questions: Sequence[str]) -> list[BreakdownRow]:
    """One row per question asked (see the module doc)."""
    rows = []
    for question in questions:
        before = vllm_sums(vllm_url)
        client_ms, fields = ask_streaming(svc, question)
        after = vllm_sums(vllm_url)
        timings, cache = fields.timings, fields.cache
        part_ms = {
            part: round((after.get(part, 0) - before.get(part, 0)) * 1000, 2) for part in VLLM_PARTS
        }
        client_ttft_ms = round(client_ms, 2)
        rows.append(
            BreakdownRow(
                question=question,
                # False: vLLM served something else meanwhile; its deltas are not this one's.
                alone=after.get("queue_count", 0) - before.get("queue_count", 0) == 1,
                client_ttft_ms=client_ttft_ms,
                **timings.model_dump(include=TIMINGS),
                **cache.model_dump(include=CACHE),
                queue_ms=part_ms["queue"],
                prefill_ms=part_ms["prefill"],
                vllm_ttft_ms=part_ms["vllm_ttft"],
                hop_ms=round(client_ttft_ms - timings.ttft_ms, 2),
                to_vllm_ms=round(timings.llm_ttft_ms - part_ms["vllm_ttft"], 2),
            )
        )
    return rows


def summarize_rows(rows: Sequence[BreakdownRow]) -> BreakdownSummary:
    """The median of each part over the requests vLLM served alone (all of them where
    none was), and how many were warm hits / reused contexts."""
    rows = [r for r in rows if r.alone] or list(rows)
    if not rows:
        return BreakdownSummary(n=0)

    def median(part: str) -> float:
        return round(statistics.median(getattr(r, part) for r in rows), 2)

    return BreakdownSummary(
        n=len(rows),
        hits=sum(1 for r in rows if is_hit(r.prompt_tokens, r.cached_tokens, r.prefix_tokens)),
        reused=sum(1 for r in rows if r.context_reused),
        median=BreakdownMedian(**{part: median(part) for part in BreakdownMedian.model_fields}),
    )
