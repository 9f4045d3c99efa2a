"""Prometheus metrics of one service instance (its own registry, so several apps
in one process, as in tests, do not collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: 50 ms buckets up to 1 s: the first-token latency heat map of the seed design.
FIRST_TOKEN_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))


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
            "Time from request arrival to the first answer token",
            buckets=FIRST_TOKEN_BUCKETS,
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

    def render(self) -> bytes:
        return generate_latest(self.registry)
