"""The service's Prometheus registry: one per app (several apps in one process, as in
tests, do not collide), shared by the HTTP instrumentation and each layer's own series."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from rag.chat.metrics import ChatMetrics
from rag.knowledge.metrics import KnowledgeMetrics
from rag.llm.metrics import ReplicaMetrics
from warmup.metrics import WarmupMetrics


class ServiceMetrics:
    """Each layer owns its series; this holds them in one registry and renders it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.chat = ChatMetrics(self.registry)
        self.knowledge = KnowledgeMetrics(self.registry)
        self.replicas = ReplicaMetrics(self.registry)
        self.warmup = WarmupMetrics(self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
