"""What one benchmark request records, when it counts as a warm hit, and the
summary statistics every section of the report uses."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from warmup.hits import full_blocks, is_warm_hit

BLOCK = 128  # vLLM-CPU's KV block: only full blocks are reused
# The question turn after the context: under half a block in this workload. The
# benchmark sees only a response's token counts, so a prompt's warm prefix is taken to
# be everything before the last QUESTION_TOKENS (a miss recomputes the whole context,
# ~400 tokens here).
QUESTION_TOKENS = BLOCK // 2


def warm_tokens(prompt_tokens: int, prefix_tokens: int | None = None) -> int:
    """The context's tokens in full blocks: what a warm prefix serves from cache. The
    service reports a block-aligned prefix's length; otherwise it is estimated."""
    if prefix_tokens:
        return full_blocks(prefix_tokens, BLOCK)
    return full_blocks(prompt_tokens - QUESTION_TOKENS, BLOCK)


def is_hit(prompt_tokens: int, cached_tokens: int, prefix_tokens: int | None = None) -> bool:
    """The service's own definition of a warm hit (``warmup.hits``)."""
    return is_warm_hit(cached_tokens, warm_tokens(prompt_tokens, prefix_tokens))


@dataclass(frozen=True)
class RequestRecord:
    """One chat as the benchmark saw it (``t_s``: seconds since its phase began)."""

    question: str
    t_s: float
    ttft_ms: float
    retrieval_ms: float
    prompt_tokens: int
    cached_tokens: int
    first_sight: bool = False

    context_reused: bool = False
    prefix_tokens: int | None = None

    @property
    def warm_tokens(self) -> int:
        return warm_tokens(self.prompt_tokens, self.prefix_tokens)

    @property
    def hit(self) -> bool:
        return is_hit(self.prompt_tokens, self.cached_tokens, self.prefix_tokens)

    @classmethod
    def from_chat(
        cls, question: str, t_s: float, body: dict[str, Any], first_sight: bool = False
    ) -> RequestRecord:
        return cls(
            question=question,
            t_s=round(t_s, 3),
            ttft_ms=float(body["timings"]["ttft_ms"]),
            retrieval_ms=float(body["timings"]["retrieval_ms"]),
            prompt_tokens=int(body["cache"]["prompt_tokens"]),
            cached_tokens=int(body["cache"]["cached_tokens"]),
            first_sight=first_sight,
            context_reused=bool(body["timings"].get("context_reused", False)),
            prefix_tokens=body["cache"].get("prefix_tokens"),
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "hit": self.hit}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def summarize(records: Sequence[RequestRecord]) -> dict[str, float | int]:
    """TTFT percentiles, hit share and retrieval p50 of a set of requests."""
    ttft = [r.ttft_ms for r in records]
    return {
        "n": len(records),
        "ttft_p50_ms": round(statistics.median(ttft), 1) if ttft else math.nan,
        "ttft_p95_ms": round(percentile(ttft, 95), 1),
        "ttft_p99_ms": round(percentile(ttft, 99), 1),
        "hit_share": round(sum(r.hit for r in records) / len(records), 4) if records else math.nan,
        "retrieval_p50_ms": round(statistics.median(r.retrieval_ms for r in records), 1)
        if records
        else math.nan,
    }
