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
    finish_reason: str = "stop"
