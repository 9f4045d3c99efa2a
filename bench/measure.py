"""What one benchmark request records, when it counts as a warm hit, and the
summary statistics every section of the report uses."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Self

from pydantic import SerializerFunctionWrapHandler, computed_field, model_serializer

from bench.record import Record
from warmup.hits import full_blocks, is_warm_hit

if TYPE_CHECKING:  # the API's models import the model stack: seconds the report need not wait
    from api.schemas import ChatResponse

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


class RequestRecord(Record):
    """One chat as the benchmark saw it (``t_s``: seconds since its phase began); written
    with ``hit``, which is recomputed when read back."""

    question: str
    t_s: float
    ttft_ms: float
    retrieval_ms: float
    prompt_tokens: int
    cached_tokens: int
    first_sight: bool = False
    context_reused: bool = False
    prefix_tokens: int | None = None
    #: How warmup saw it: hit, partial, evicted (a registered entry) or cold.
    warm_state: str | None = None

    @property
    def warm_tokens(self) -> int:
        return warm_tokens(self.prompt_tokens, self.prefix_tokens)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def hit(self) -> bool:
        return is_hit(self.prompt_tokens, self.cached_tokens, self.prefix_tokens)

    @classmethod
    def of_chat(
        cls, question: str, t_s: float, reply: ChatResponse, first_sight: bool = False
    ) -> Self:
        return cls(
            question=question,
            t_s=round(t_s, 3),
            ttft_ms=reply.timings.ttft_ms,
            retrieval_ms=reply.timings.retrieval_ms,
            prompt_tokens=reply.cache.prompt_tokens,
            cached_tokens=reply.cache.cached_tokens,
            first_sight=first_sight,
            context_reused=reply.timings.context_reused,
            prefix_tokens=reply.cache.prefix_tokens,
            warm_state=reply.cache.warm_state.value,
        )


class ChangeRequest(RequestRecord):
    """A request to a changed context; ``warm_before``: its context was warm before the
    change (results from before that was recorded count every request as such)."""

    warm_before: bool = True

    @model_serializer(mode="wrap")
    def _warm_before_last(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """``warm_before`` after ``hit``, where results.json has always had it."""
        data: dict[str, object] = handler(self)
        if "warm_before" in data:
            data["warm_before"] = data.pop("warm_before")
        return data

    @classmethod
    def of(cls, record: RequestRecord, warm_before: bool) -> ChangeRequest:
        return cls(**record.model_dump(exclude={"hit"}), warm_before=warm_before)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


class Summary(Record):
    """TTFT percentiles, hit share and retrieval p50 of a set of requests (NaN: none)."""

    n: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    ttft_p99_ms: float
    hit_share: float
    retrieval_p50_ms: float

    def line(self) -> str:
        """The one-line form the suite logs."""
        if not self.n:
            return "n=0"
        return (
            f"p50 {self.ttft_p50_ms} p99 {self.ttft_p99_ms} ms, "
            f"hits {self.hit_share:.0%} (n={self.n})"
        )


def summarize(records: Sequence[RequestRecord]) -> Summary:
    ttft = [r.ttft_ms for r in records]
    return Summary(
        n=len(records),
        ttft_p50_ms=round(statistics.median(ttft), 1) if ttft else math.nan,
        ttft_p95_ms=round(percentile(ttft, 95), 1),
        ttft_p99_ms=round(percentile(ttft, 99), 1),
        hit_share=round(sum(r.hit for r in records) / len(records), 4) if records else math.nan,
        retrieval_p50_ms=round(statistics.median(r.retrieval_ms for r in records), 1)
        if records
        else math.nan,
    )
