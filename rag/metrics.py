"""Prometheus metrics of one service instance (its own registry, so several apps
in one process, as in tests, do not collide), and its timeline of recent chats (what the
console draws without a Prometheus server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rag.chat.timeline import HEATMAP_BUCKET_MS, HEATMAP_BUCKETS, ChatTimeline

#: 50 ms buckets up to 1 s (the first-token latency heat map of the cold-start design:
#: 20 buckets, the last from 950 ms), then coarser ones to 30 s: a cold prefill of a
#: realistic RAG prompt takes several seconds on a CPU host.
FIRST_TOKEN_BUCKETS = (
    *(round(HEATMAP_BUCKET_MS * i / 1000, 2) for i in range(1, HEATMAP_BUCKETS + 1)),
    *(1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0),
)


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "warmrag_chat_requests",
            "Chat requests by endpoint and outcome",
            ["endpoint", "outcome"],
            registry=r,
        )
        self.first_token_latency = Histogram(
            "warmrag_first_token_latency_seconds",
            "Time from request arrival to the first answer token; warm: the chat was "
            "served from a warm prefix (the API's cache.warm_hit)",
            ["warm"],
            buckets=FIRST_TOKEN_BUCKETS,
            registry=r,
        )
        self.context_memo = Counter(
            "warmrag_chat_contexts_total",
            "Chats by where their context came from: reused (a repeated question, no "
            "retrieval) or retrieved",
            ["source"],
            registry=r,
        )
        self.bad_cases = Counter(
            "warmrag_bad_cases",
            "Chats kept as bad cases, by reason: slow (first token over the SLO threshold) "
            "or evicted (a registered warm prefix vLLM no longer had)",
            ["reason"],
            registry=r,
        )
        self.retrieval_latency = Histogram(
            "warmrag_retrieval_latency_seconds",
            "Embedding + vector search + subgraph time",
            registry=r,
        )
        self.prompt_tokens = Counter(
            "warmrag_prompt_tokens", "Prompt tokens sent to vLLM by chats", registry=r
        )
        self.cached_tokens = Counter(
            "warmrag_cached_tokens", "Prompt tokens vLLM served from its prefix cache", registry=r
        )
        self.documents = Gauge("warmrag_documents", "Documents in the knowledge base", registry=r)
        self.kb_version = Gauge("warmrag_kb_version", "Knowledge-base version", registry=r)
        self.ingested_documents = Counter(
            "warmrag_ingested_documents", "Documents by ingest outcome", ["outcome"], registry=r
        )

        # Warmup (names from the seed design's checklist)
        self.cold_starts = Counter(
            "warmrag_cold_start", "Start-ups with an empty prefix cache (per instance)", registry=r
        )
        self.warmup_lookups = Counter(
            "warmrag_warmup_lookups", "Chats whose prefix was in the warm registry", registry=r
        )
        self.warmup_hits = Counter(
            "warmrag_warmup_hits",
            "Chats served from a registered warm prefix (all its full blocks cached)",
            registry=r,
        )
        self.warmup_hit_ratio = Gauge(
            "warmrag_warmup_hit_ratio", "warmup_hits / chats since start", registry=r
        )
        self.warmup_partial_hits = Counter(
            "warmrag_warmup_partial_hits",
            "Chats on a partly warmed entry (a context longer than the per-entry share) "
            "whose warmed part was all cached",
            registry=r,
        )
        self.warmup_declined = Counter(
            "warmrag_warmup_declined",
            "Contexts warmup did not warm, by reason (over_budget, kv_full, no_budget, "
            "no_full_block)",
            ["reason"],
            registry=r,
        )
        self.warmup_truncated = Counter(
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
        self.warm_entries = Gauge("warmrag_warm_entries", "Entries in the registry", registry=r)
        self.warm_tokens = Gauge("warmrag_warm_tokens", "Prefix tokens kept warm", registry=r)
        self.warm_budget_tokens = Gauge(
            "warmrag_warm_budget_tokens",
            "Prefix tokens warmup may keep warm (its share of vLLM's KV cache)",
            registry=r,
        )
        self.warm_requests = Counter(
            "warmrag_warm_requests", "Prefill requests sent to vLLM by warmup", registry=r
        )
        self.warm_prefill_tokens = Counter(
            "warmrag_warm_prefill_tokens",
            "Prompt tokens vLLM computed for warmup (not already cached)",
            registry=r,
        )
        self.detection_seconds = Histogram(
            "warmrag_change_detection_seconds",
            "Time to find the entries a change affects",
            registry=r,
        )

        # vLLM replicas behind the prefix-affinity router (rag/llm/pool.py)
        self.replica_cold_starts = Counter(
            "warmrag_replica_cold_start",
            "vLLM replicas seen coming up or back (their prefix cache starts empty)",
            ["replica"],
            registry=r,
        )
        self.replica_chats = Counter(
            "warmrag_replica_chats",
            "Chats by replica; hit: vLLM served some prompt tokens from its prefix cache",
            ["replica", "hit"],
            registry=r,
        )
        self.replica_prompt_tokens = Counter(
            "warmrag_replica_prompt_tokens",
            "Prompt tokens of chats, by replica",
            ["replica"],
            registry=r,
        )
        self.replica_cached_tokens = Counter(
            "warmrag_replica_cached_tokens",
            "Prompt tokens of chats served from the replica's prefix cache",
            ["replica"],
            registry=r,
        )
        self.replica_routes = Counter(
            "warmrag_replica_routes",
            "Chats and prefills routed, by replica and why (warm, cold, overflow, failover,"
            " round_robin)",
            ["replica", "route"],
            registry=r,
        )
        self.replica_kv_usage = Gauge(
            "warmrag_replica_kv_usage",
            "Share of the replica's KV cache in use, at the last reading",
            ["replica"],
            registry=r,
        )
        self.replica_up = Gauge(
            "warmrag_replica_up",
            "1 while the replica is routed to, 0 while down",
            ["replica"],
            registry=r,
        )
        self._chats = 0
        self._hits = 0
        self.timeline = ChatTimeline()

    def observe_first_token(self, seconds: float, warm_hit: bool) -> None:
        self.first_token_latency.labels("true" if warm_hit else "false").observe(seconds)
        self.timeline.record(seconds * 1000, warm_hit)

    def record_chat(self, warm_hit: bool) -> None:
        self._chats += 1
        self._hits += int(warm_hit)
        self.warmup_hit_ratio.set(self._hits / self._chats)

    def render(self) -> bytes:
        return generate_latest(self.registry)
