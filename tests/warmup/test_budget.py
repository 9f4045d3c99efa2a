"""The warm budget's share and the reason it gives, by what vLLM reports."""

from __future__ import annotations

from rag.llm.client import CacheConfig
from warmup.budget import GIB, WarmBudget


def test_unreported_memory_takes_the_middle_tier_and_says_why() -> None:
    budget = WarmBudget.from_cache(CacheConfig(16, 7716, None), entry_max_tokens=1024)
    assert budget.share == 0.3 and budget.max_tokens == int(123_456 * 0.3)
    assert budget.reason == (
        "vLLM does not report its KV memory (GPU); 30% of 123,456 tokens;"
        " set WARMRAG_WARMUP_BUDGET_SHARE to change"
    )


def test_the_setting_wins_and_is_named() -> None:
    budget = WarmBudget.from_cache(CacheConfig(16, 7716, None), 1024, share_override=0.2)
    assert budget.share == 0.2
    assert budget.reason == "WARMRAG_WARMUP_BUDGET_SHARE sets 20% of 123,456 tokens"


def test_reported_memory_gives_its_tier() -> None:
    budget = WarmBudget.from_cache(CacheConfig(128, 1456, 4 * GIB), 1024)
    assert budget.share == 0.3
    assert budget.reason.startswith("4.0 GiB of KV memory: 30% of 186,368 tokens")
    small = WarmBudget.from_cache(CacheConfig(128, 728, 2 * GIB), 1024)
    assert not small.enabled and "under 4 GiB: no warmup" in small.reason
