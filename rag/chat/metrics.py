"""The chat path's Prometheus series, and its timeline of recent chats (what the console
draws without a Prometheus server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from rag.chat.timeline import HEATMAP_BUCKET_MS, HEATMAP_BUCKETS, ChatTimeline

#: 50 ms buckets up to 1 s (the first-token latency heat map of the cold-start design:
#: 20 buckets, the last from 950 ms), then coarser ones to 30 s: a cold prefill of a
#: realistic RAG prompt takes several seconds on a CPU host.
FIRST_TOKEN_BUCKETS = (
    *(round(HEATMAP_BUCKET_MS * i / 1000, 2) for i in range(1, HEATMAP_BUCKETS + 1)),
    *(1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0),
)


class ChatMetrics:
    """Chats by outcome, first-token latency, where contexts came from, bad cases,
    retrieval time, and the prompt tokens sent and served from vLLM's cache."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
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
        self.served = Counter(
            "warmrag_chat_served",
            "Chats by where their context prefix came from (the API's cache.served): warm "
            "(a warm hit), cached (vLLM's cache, not a prefix warmup keeps) or cold",
            ["served"],
            registry=r,
        )
        self.timeline = ChatTimeline()

    def observe_first_token(self, seconds: float, warm_hit: bool) -> None:
        self.first_token_latency.labels("true" if warm_hit else "false").observe(seconds)
        self.timeline.record(seconds * 1000, warm_hit)
