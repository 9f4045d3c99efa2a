"""How many prefix tokens warmup may keep in vLLM's KV cache.

The warmup design's tiers, by the memory the KV cache lives in: under 4 GiB no warmup (the
cache is needed for live requests), 4-16 GiB at most 30%, above 16 GiB at most 50%.
On vLLM-CPU the KV-cache space plays the device's part. GPU vLLM does not report its
KV memory (it sizes the cache from ``gpu_memory_utilization``); there the 30% tier
applies, and the budget's ``reason`` says so.

A single entry may use at most ``per_entry_max_tokens``: the seed's quarter of the
context window, raised to the largest prefix the prompt builder can produce for the
chat path's settings (``rag.chat.prompt.PromptShape``), never past what a chat can send.
The quarter alone (1,024 tokens of a 4,096-token window) is smaller than what
small-to-big windows give real documents: measured 1,166-1,557 tokens, and every one
was dropped. The share is a budget rule, not a filter: a longer prefix is warmed as far
as its share allows (``entry_tokens``), block-aligned, and counted as partly warm.
"""

from __future__ import annotations

from dataclasses import dataclass

from rag.chat.prompt import PromptShape
from rag.llm.client import CacheConfig
from warmup.hits import full_blocks

GIB = 1024**3
#: The share where vLLM does not report its KV memory: the middle tier.
UNREPORTED_MEMORY_SHARE = 0.3
#: The setting that overrides the tiers, as a reason names it.
SHARE_SETTING = "WARMRAG_WARMUP_BUDGET_SHARE"


def tier_share(memory_bytes: int) -> float:
    if memory_bytes < 4 * GIB:
        return 0.0
    if memory_bytes <= 16 * GIB:
        return 0.3
    return 0.5


def _share_and_reason(cache: CacheConfig, share_override: float | None) -> tuple[float, str]:
    """The share of the cache warmup may use, and why, in words for the log and API."""
    capacity = f"{cache.capacity_tokens:,} tokens"
    if share_override is not None:
        return share_override, f"{SHARE_SETTING} sets {share_override:.0%} of {capacity}"
    change = f"set {SHARE_SETTING} to change"
    if cache.memory_bytes is None:
        share = UNREPORTED_MEMORY_SHARE
        return (
            share,
            f"vLLM does not report its KV memory (GPU); {share:.0%} of {capacity}; {change}",
        )
    share = tier_share(cache.memory_bytes)
    memory = f"{cache.memory_bytes / GIB:.1f} GiB of KV memory"
    if share == 0.0:
        return share, f"{memory} is under 4 GiB: no warmup, live requests need it; {change}"
    return share, f"{memory}: {share:.0%} of {capacity}; {change}"


@dataclass(frozen=True)
class WarmBudget:
    capacity_tokens: int
    share: float
    block_size: int
    per_entry_max_tokens: int
    #: How the share was chosen (tier, unreported memory or the setting), in words.
    reason: str = ""

    @property
    def max_tokens(self) -> int:
        return int(self.capacity_tokens * self.share)

    def describe(self) -> str:
        return (
            f"{self.max_tokens:,} of {self.capacity_tokens:,} KV tokens (share "
            f"{self.share:.0%}), at most {self.per_entry_max_tokens:,} per entry"
        )

    @property
    def enabled(self) -> bool:
        return self.max_tokens > 0

    def full_blocks(self, tokens: int) -> int:
        """Tokens of a prompt that sit in full KV blocks: the part a later request reuses."""
        return full_blocks(tokens, self.block_size)

    @property
    def entry_cap(self) -> int:
        """The most one entry warms of a longer prefix: the longest block-aligned part
        within the per-entry share."""
        return self.full_blocks(self.per_entry_max_tokens)

    def entry_tokens(self, tokens: int) -> int:
        """Of a prefix of ``tokens``, what one entry may warm: all of it within the
        per-entry share, else ``entry_cap``."""
        return tokens if tokens <= self.per_entry_max_tokens else self.entry_cap

    @classmethod
    def from_cache(
        cls,
        cache: CacheConfig,
        entry_max_tokens: int,
        share_override: float | None = None,
    ) -> WarmBudget:
        """``entry_max_tokens``: the per-entry share (``entry_share``)."""
        share, reason = _share_and_reason(cache, share_override)
        return cls(
            capacity_tokens=cache.capacity_tokens,
            share=share,
            block_size=cache.block_size,
            per_entry_max_tokens=entry_max_tokens,
            reason=reason,
        )


def entry_share(context_window: int, largest_prefix_tokens: int, answer_tokens: int) -> int:
    """The per-entry share: the seed's quarter of the context window, or the largest
    prefix the prompt builder produces where that is more, never more than a chat can
    send with room for its answer (``answer_tokens``)."""
    room = max(0, context_window - answer_tokens)
    return max(context_window // 4, min(largest_prefix_tokens, room))


@dataclass(frozen=True)
class ChatShape:
    """The chat path's settings that size one entry: the model's window, the prompts
    the builder renders, and the room a chat leaves for its answer."""

    context_window: int
    prompt: PromptShape
    answer_tokens: int

    def entry_share(self, block_size: int) -> int:
        largest = self.prompt.largest_prefix_tokens(block_size)
        return entry_share(self.context_window, largest, self.answer_tokens)
