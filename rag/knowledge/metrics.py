"""The knowledge base's Prometheus series: its size, its version, and ingest outcomes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from rag.knowledge.models import ChangeSet


class KnowledgeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.documents = Gauge("warmrag_documents", "Documents in the knowledge base", registry=r)
        self.kb_version = Gauge("warmrag_kb_version", "Knowledge-base version", registry=r)
        self.ingested_documents = Counter(
            "warmrag_ingested_documents", "Documents by ingest outcome", ["outcome"], registry=r
        )

    def record_change(self, change: ChangeSet) -> None:
        """Count one committed ingest or delete by what it did to each document."""
        self.ingested_documents.labels("added").inc(len(change.added))
        self.ingested_documents.labels("updated").inc(len(change.updated))
        self.ingested_documents.labels("unchanged").inc(len(change.unchanged))
        self.ingested_documents.labels("deleted").inc(len(change.deleted))

    def record_size(self, documents: int, version: int) -> None:
        self.documents.set(documents)
        self.kb_version.set(version)
