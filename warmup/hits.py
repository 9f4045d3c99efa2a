"""When a chat counts as served from a warm prefix: one definition for the service's
``cache.warm_hit`` and the benchmark's hit share.

vLLM reuses only full KV blocks, so the part of a prefix that can come from cache is
its tokens in full blocks; the tail after the last full block, and the question, are
always computed. A chat hit its warm prefix when vLLM served all of that part from
its cache (``usage.prompt_tokens_details.cached_tokens``). The rule itself
(``is_warm_hit``) sits with the chat's results, which apply it to any prefix for
``cache.served``; this module applies it to the entries warmup keeps.
"""

from __future__ import annotations

from rag.chat.results import WarmState, full_blocks, is_warm_hit
from warmup.metrics import WarmupMetrics
from warmup.models import WarmEntry

__all__ = ["count_lookup", "entry_warm_state", "full_blocks", "is_warm_hit", "warm_state"]


def warm_state(cached_tokens: int, warmed_tokens: int, context_tokens: int) -> WarmState:
    """How a chat on a registered prefix stood: ``warmed_tokens`` are the entry's warmed
    tokens in full blocks, ``context_tokens`` the whole prefix's (more where the entry
    was warmed only up to the per-entry share).

    A hit needs the whole prefix's full blocks from cache; a partly warmed entry whose
    warmed part came from cache is ``partial`` (honestly not a hit: the rest was
    computed); anything less means vLLM evicted part of what was warmed."""
    if is_warm_hit(cached_tokens, max(context_tokens, warmed_tokens)):
        return WarmState.HIT
    if is_warm_hit(cached_tokens, warmed_tokens):
        return WarmState.PARTIAL
    return WarmState.EVICTED


def entry_warm_state(cached_tokens: int, entry: WarmEntry, block_size: int | None) -> WarmState:
    """``warm_state`` for a chat on ``entry``'s prefix (``block_size``: vLLM's, None
    before warmup read it; a partial entry then counts its warmed part only)."""
    context = entry.cached_block_tokens
    if entry.partial and entry.context_tokens is not None and block_size:
        context = full_blocks(entry.context_tokens, block_size)
    return warm_state(cached_tokens, entry.cached_block_tokens, context)


def count_lookup(metrics: WarmupMetrics, state: WarmState) -> None:
    """Count a chat on a registered entry by how it was served."""
    metrics.lookups.inc()
    if state is WarmState.HIT:
        metrics.hits.inc()
    elif state is WarmState.PARTIAL:
        metrics.partial_hits.inc()
    else:
        metrics.kv_cache_misses.inc()
