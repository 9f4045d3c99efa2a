"""``bench.ingest_rate`` measures the service's own stores, with its default settings."""

from __future__ import annotations

from pathlib import Path

from api.config import Settings
from bench.ingest_rate import measure_kb_ingest
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn

TEXT = (
    "A stash entry records the working tree and the index. "
    "The list subcommand shows every entry, newest first. "
) * 12


def test_the_ingest_rate_is_measured_on_the_default_embedded_index(
    tmp_path: Path, embedder: Embedder
) -> None:
    documents = [DocumentIn(id=f"doc-{i}", text=f"Page {i}. {TEXT}") for i in range(3)]
    runs = measure_kb_ingest(documents, tmp_path, embedder, batch_size=2)
    settings = Settings(data_dir=tmp_path)
    # The service's default index holds the vectors; no local-mode store was made.
    assert settings.edge_path.is_dir()
    assert not settings.qdrant_path.exists()
    assert runs.chunk_only.stages["index add"] > 0
    # The raw run embedded the texts the knowledge base cut and stored.
    assert runs.raw.chunks == runs.chunk_only.chunks > len(documents)
