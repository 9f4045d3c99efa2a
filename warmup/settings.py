"""The warmup layer's settings: one model, nested in ``api.config.Settings`` as ``warmup``.

Each field is read from ``WARMRAG_WARMUP_<FIELD>`` (``WARMRAG_WARMUP_TTL_S`` sets
``ttl_s``); the README's Settings table documents them. What warmup shares with the
chat path (the passages per question, the context window) stays in ``Settings`` and
is handed to ``WarmupService`` by the composition root, never copied here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from warmup.models import SYNTHETIC_QUERIES, WarmupStrategy
from warmup.predict import DocumentQuerySource


class WarmupSettings(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    enabled: bool = Field(True, description="Warmup on or off.")
    strategy: WarmupStrategy = Field(
        WarmupStrategy.KNOWLEDGE_AWARE,
        description="knowledge_aware, hot_queries, synthetic or hybrid (docs/warmup.md).",
    )
    synthetic_queries: tuple[str, ...] = Field(
        SYNTHETIC_QUERIES, description="Generic questions the synthetic strategies send."
    )
    ttl_s: float = Field(1800.0, gt=0, description="How long a warm entry lives unless extended.")
    half_life_s: float = Field(3600.0, gt=0, description="Half-life of hot-query counts.")
    hot_min_count: float = Field(0.5, gt=0, description="Decayed count that makes a query hot.")
    steps: int = Field(3, ge=1, description="Progressive warmup steps.")
    kv_usage_threshold: float = Field(
        0.7, gt=0, le=1, description="Stop warming when vLLM's KV usage passes this."
    )
    max_concurrency: int = Field(1, ge=1, description="Prefills in flight at once.")
    busy_share: float = Field(
        0.1, gt=0, le=1, description="Share of vLLM's time warmup may take next to chats."
    )
    debounce_s: float = Field(1.0, ge=0, description="Quiet time after a change before detection.")
    restore_max_entries: int = Field(64, ge=0, description="Entries re-warmed before /ready.")
    budget_share: float | None = Field(
        None, ge=0, le=1, description="Share of the KV cache for warm prefixes (default: tier)."
    )
    entry_max_tokens: int | None = Field(
        None,
        ge=1,
        description="Prefix tokens one entry may warm; a longer context is warmed that far "
        "(default: the largest prefix the prompt builder produces, at least a quarter of the "
        "context window).",
    )
    residency: bool = Field(
        True,
        description="Follow vLLM's KV-cache events: which warm entries it holds, and re-warm a"
        " hot one as soon as vLLM evicts it (needs events: WARMRAG_VLLM_KV_EVENTS).",
    )
    retouch_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Share of time re-touching hot entries near vLLM's LRU tail may take "
        "(soft pinning; 0 turns it off).",
    )
    retouch_at: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Re-touch a hot entry once vLLM stored this share of its cache's blocks "
        "since the entry was last used.",
    )
    document_queries: bool = Field(
        True,
        description="Warm questions predicted from new documents (first sight; measured "
        "in docs/warmup.md#first-sight).",
    )
    document_query_source: DocumentQuerySource = Field(
        DocumentQuerySource.HEADINGS,
        description="headings: each document's title and section headings; first_sentence: "
        "its first sentence (docs/warmup.md#first-sight).",
    )
    detect_interval_s: float = Field(600.0, gt=0, description="Scheduled full re-check.")
    sweep_interval_s: float = Field(60.0, gt=0, description="TTL sweep.")
    hot_interval_s: float = Field(120.0, gt=0, description="Hot-query warmup.")
    query_log_max_rows: int = Field(
        20_000,
        ge=1,
        description="Queries kept at most; past it the coldest that back no entry go first.",
    )
    query_log_min_count: float = Field(
        0.05,
        ge=0,
        description="The sweep forgets queries decayed below this (not seeds, none backing an"
        " entry).",
    )
