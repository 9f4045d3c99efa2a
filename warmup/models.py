"""Records of the warmup layer."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class RewarmReason(StrEnum):
    """Why a prefix was (re)warmed; the label of ``warmrag_rewarm_total``."""

    SEED = "seed"
    HOT = "hot"
    KB_CHANGE = "kb_change"
    EVICTED = "evicted"
    STARTUP = "startup"
    EXPIRED_HOT = "expired_hot"


class QueryRecord(BaseModel):
    """One normalized question: its embedding, how hot it is, and its warm entry."""

    key: str
    text: str
    count: float = 0.0  # decayed to ``last_seen``
    last_seen: float = 0.0
    seed: bool = False
    fingerprint: str | None = None
    kth_score: float | None = Field(
        None, description="Score of the last passage of its top-k when warmed (detection bound)."
    )


class WarmEntry(BaseModel):
    """A prefix kept warm in vLLM: the exact messages, what they were built from, its TTL."""

    fingerprint: str
    messages: list[dict[str, str]]
    chunk_ids: list[str]
    doc_ids: list[str]
    content_hashes: list[str]
    triples: list[list[str]]
    prefix_tokens: int
    cached_block_tokens: int = Field(description="Prefix tokens in full KV blocks: what can hit.")
    warmed_at: float
    expires_at: float
    hits: int = 0
    last_hit: float | None = None
    queries: list[str] = Field(default_factory=list)
