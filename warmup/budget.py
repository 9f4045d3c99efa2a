"""How many prefix tokens warmup may keep in vLLM's KV cache.

Seed 003's tiers, by the memory the KV cache lives in: under 4 GiB no warmup (the
cache is needed for live requests), 4-16 GiB at most 30%, above 16 GiB at most 50%.
On vLLM-CPU the KV-cache space plays the device's part. A single prefix may use at
most a quarter of the context window.
"""

from __future__ import annotations

from dataclasses import dataclass

from rag.llm import CacheConfig
from warmup.hits import full_blocks

GIB = 1024**3


def tier_share(memory_bytes: int) -> float:
    if memory_bytes < 4 * GIB:
        return 0.0
    if memory_bytes <= 16 * GIB:
        return 0.3
    return 0.5


@dataclass(frozen=True)
class WarmBudget:
    capacity_tokens: int
    share: float
    block_size: int
    per_entry_max_tokens: int

    @property
    def max_tokens(self) -> int:
        return int(self.capacity_tokens * self.share)

    @property
    def enabled(self) -> bool:
        return self.max_tokens > 0

    def full_blocks(self, tokens: int) -> int:
        """Tokens of a prompt that sit in full KV blocks: the part a later request reuses."""
        return full_blocks(tokens, self.block_size)

    @classmethod
    def from_cache(
        cls, cache: CacheConfig, context_window: int, share_override: float | None = None
    ) -> WarmBudget:
        share = tier_share(cache.memory_bytes) if share_override is None else share_override
        return cls(
            capacity_tokens=cache.capacity_tokens,
            share=share,
            block_size=cache.block_size,
            per_entry_max_tokens=context_window // 4,
        )
