"""Warmup's Prometheus series (names from the cold-start design's checklist)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from warmup.models import DeclineReason


class WarmupMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.cold_starts = Counter(
            "warmrag_cold_start", "Start-ups with an empty prefix cache (per instance)", registry=r
        )
        self.lookups = Counter(
            "warmrag_warmup_lookups", "Chats whose prefix was in the warm registry", registry=r
        )
        self.hits = Counter(
            "warmrag_warmup_hits",
            "Chats served from a registered warm prefix (all its full blocks cached)",
            registry=r,
        )
        self.hit_ratio = Gauge(
            "warmrag_warmup_hit_ratio", "warmup_hits / chats since start", registry=r
        )
        self.partial_hits = Counter(
            "warmrag_warmup_partial_hits",
            "Chats on a partly warmed entry (a context longer than the per-entry share) "
            "whose warmed part was all cached",
            registry=r,
        )
        self.declined = Counter(
            "warmrag_warmup_declined",
            "Contexts warmup did not warm, by reason (over_budget, kv_full, no_budget, "
            "no_full_block)",
            ["reason"],
            registry=r,
        )
        self.truncated = Counter(
            "warmrag_warmup_truncated",
            "Contexts longer than the per-entry share, warmed only as far as it allows",
            registry=r,
        )
        self.kv_cache_misses = Counter(
            "warmrag_kv_cache_miss",
            "Chats on a registered prefix that vLLM had (partly) evicted",
            registry=r,
        )
        self.rewarms = Counter(
            "warmrag_rewarm", "Prefixes warmed, by reason", ["reason"], registry=r
        )
        self.ttl_extensions = Counter(
            "warmrag_ttl_extension", "Entries whose TTL was extended without a prefill", registry=r
        )
        self.entries = Gauge("warmrag_warm_entries", "Entries in the registry", registry=r)
        self.tokens = Gauge("warmrag_warm_tokens", "Prefix tokens kept warm", registry=r)
        self.budget_tokens = Gauge(
            "warmrag_warm_budget_tokens",
            "Prefix tokens warmup may keep warm (its share of vLLM's KV cache)",
            registry=r,
        )
        self.requests = Counter(
            "warmrag_warm_requests", "Prefill requests sent to vLLM by warmup", registry=r
        )
        self.prefill_tokens = Counter(
            "warmrag_warm_prefill_tokens",
            "Prompt tokens vLLM computed for warmup (not already cached)",
            registry=r,
        )
        self.detection_seconds = Histogram(
            "warmrag_change_detection_seconds",
            "Time to find the entries a change affects",
            registry=r,
        )
        self.retouch_seconds = Counter(
            "warmrag_warmup_retouch_seconds",
            "Time re-touch requests took (soft pinning of hot entries near the LRU tail)",
            registry=r,
        )
        self.resident_entries = Gauge(
            "warmrag_warm_entries_resident",
            "Warm entries by what vLLM's KV events say it holds (full, partial, none, unknown)",
            ["state"],
            registry=r,
        )
        self.mispredictions = Counter(
            "warmrag_residency_mispredictions",
            "Chats on a tracked entry whose cached tokens the residency index did not predict",
            registry=r,
        )
        self._chats = 0
        self._hits = 0

    def count_declined(self, declined: Mapping[DeclineReason, int]) -> None:
        for reason, count in declined.items():
            self.declined.labels(reason.value).inc(count)

    def set_registry(self, entries: int, tokens: int) -> None:
        self.entries.set(entries)
        self.tokens.set(tokens)

    def record_chat(self, warm_hit: bool) -> None:
        self._chats += 1
        self._hits += int(warm_hit)
        self.hit_ratio.set(self._hits / self._chats)
