"""What a chat returns: its answer's cache accounting and timings (the HTTP API returns
these two models as they are), and the whole result in-process."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, computed_field

if TYPE_CHECKING:  # only ChatResult's annotations: the API's models import this module
    from rag.chat.retriever import Fact
    from rag.knowledge.models import Passage
    from rag.llm.client import Usage


class WarmState(StrEnum):
    """How a chat's prefix stood against the warm registry."""

    HIT = "hit"  # registered, and vLLM served all its full blocks from cache
    # registered partly warm (longer than warmup's per-entry share): vLLM served the
    # warmed part from cache, and computed the rest
    PARTIAL = "partial"
    EVICTED = "evicted"  # registered, but vLLM had evicted (part of) what was warmed
    COLD = "cold"  # not registered (or warmup is off)


class FinishReason(StrEnum):
    """Why an answer ended."""

    STOP = "stop"  # the model ended it
    LENGTH = "length"  # it reached max_tokens
    REPEAT = "repeat"  # it began to repeat itself and was stopped (rag.chat.repetition)


class Served(StrEnum):
    """Where a chat's context prefix came from, in the three words a user reads."""

    WARM = "warm"  # a warm hit: warmup keeps this prefix, and vLLM had all of it
    # vLLM had the whole prefix in its cache, but warmup does not keep it (an earlier
    # chat computed it): as fast as a warm hit, and as likely to be evicted
    CACHED = "cached"
    COLD = "cold"  # the prefix was computed, all of it or a part


def full_blocks(tokens: int, block_size: int) -> int:
    """Tokens of a prompt that sit in full KV blocks: the part a later request reuses."""
    return max(0, tokens) // block_size * block_size


def is_warm_hit(cached_tokens: int, warm_tokens: int) -> bool:
    """Whether vLLM served a prefix from cache. vLLM reuses only full KV blocks, so
    ``warm_tokens`` are the prefix's tokens in full blocks (``full_blocks``) and the hit
    needs all of them (``usage.prompt_tokens_details.cached_tokens``); a prefix with no
    full block cannot be served from cache, so it never hits."""
    return warm_tokens > 0 and cached_tokens >= warm_tokens


class CacheInfo(BaseModel):
    """How much of the prompt vLLM served from its prefix cache, and why."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int
    cached_tokens: int
    prefix_tokens: int | None = Field(
        None,
        description="The context prefix's tokens, where known (block-aligned): a warm "
        "hit has all of them cached and computes only the question turn.",
    )
    warm_state: WarmState = Field(
        WarmState.COLD,
        description="hit: served from a warm prefix; partial: a partly warmed entry whose "
        "warmed part was all cached; evicted: the prefix was registered warm but vLLM no "
        "longer had all of it; cold: not registered.",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def warm_hit(self) -> bool:
        """Served from a registered warm prefix (``warmup.hits`` defines when)."""
        return self.warm_state is WarmState.HIT

    @computed_field(  # type: ignore[prop-decorator]
        description="warm: a warm hit; cached: vLLM served the whole context prefix from "
        "its cache, though warmup does not keep it; cold: the prefix was computed."
    )
    @property
    def served(self) -> Served:
        """The hit rule of ``warm_hit``, applied to the prefix whether or not warmup
        keeps it (``prefix_tokens`` are block-aligned; unknown, it cannot be told)."""
        if self.warm_hit:
            return Served.WARM
        if self.prefix_tokens is not None and is_warm_hit(self.cached_tokens, self.prefix_tokens):
            return Served.CACHED
        return Served.COLD


class Timings(BaseModel):
    """Milliseconds from the request's arrival: ``ttft_ms`` = ``retrieval_ms`` +
    ``prompt_ms`` + ``llm_ttft_ms`` (vLLM's queue, prefill and first token) + glue.
    ``retrieval_ms`` is embedding, search and graph (~0 when the context was reused),
    ``prompt_ms`` rendering and aligning the prefix."""

    model_config = ConfigDict(frozen=True)

    retrieval_ms: float
    ttft_ms: float
    total_ms: float
    prompt_ms: float = 0.0
    llm_ttft_ms: float = 0.0
    context_reused: bool = Field(
        False, description="A repeated question's context, reused with no retrieval."
    )


@dataclass(frozen=True)
class ChatResult:
    answer: str
    passages: list[Passage]
    facts: Sequence[Fact]
    cache: CacheInfo
    timings: Timings
    usage: Usage
    prefix_fingerprint: str
    finish_reason: FinishReason = FinishReason.STOP
