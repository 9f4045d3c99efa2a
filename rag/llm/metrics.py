"""The replica pool's Prometheus series: routes, chats, prompt and cached tokens, KV
usage and up/down, each by replica (``rag.llm.pool``)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from rag.llm.client import Usage
from rag.llm.placement import Route, Transition, TransitionKind


class ReplicaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.cold_starts = Counter(
            "warmrag_replica_cold_start",
            "vLLM replicas seen coming up or back (their prefix cache starts empty)",
            ["replica"],
            registry=r,
        )
        self.chats = Counter(
            "warmrag_replica_chats",
            "Chats by replica; hit: vLLM served some prompt tokens from its prefix cache",
            ["replica", "hit"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "warmrag_replica_prompt_tokens",
            "Prompt tokens of chats, by replica",
            ["replica"],
            registry=r,
        )
        self.cached_tokens = Counter(
            "warmrag_replica_cached_tokens",
            "Prompt tokens of chats served from the replica's prefix cache",
            ["replica"],
            registry=r,
        )
        self.routes = Counter(
            "warmrag_replica_routes",
            "Chats and prefills routed, by replica and why (warm, cold, overflow, failover,"
            " round_robin)",
            ["replica", "route"],
            registry=r,
        )
        self.kv_usage = Gauge(
            "warmrag_replica_kv_usage",
            "Share of the replica's KV cache in use, at the last reading",
            ["replica"],
            registry=r,
        )
        self.up = Gauge(
            "warmrag_replica_up",
            "1 while the replica is routed to, 0 while down",
            ["replica"],
            registry=r,
        )

    def add_replicas(self, names: Sequence[str]) -> None:
        """Every replica's series exists from the start, up and with an empty cache."""
        for name in names:
            self.up.labels(name).set(1)
            self.kv_usage.labels(name).set(0)
            self.cold_starts.labels(name)

    def route(self, route: Route) -> None:
        self.routes.labels(route.replica, route.kind.value).inc()

    def chat(self, name: str, usage: Usage) -> None:
        hit = "true" if usage.cached_tokens > 0 else "false"
        self.chats.labels(name, hit).inc()
        self.prompt_tokens.labels(name).inc(usage.prompt_tokens)
        self.cached_tokens.labels(name).inc(usage.cached_tokens)

    def record_kv_usage(self, name: str, usage: float) -> None:
        self.kv_usage.labels(name).set(usage)

    def transition(self, t: Transition) -> None:
        self.up.labels(t.replica).set(t.kind is not TransitionKind.WENT_DOWN)
        if t.kind is not TransitionKind.WENT_DOWN:
            self.cold_starts.labels(t.replica).inc()
