"""Fixtures for the knowledge-graph tests: the real spaCy model and the real embedding model.

Both models load once per test session; every graph gets its own temporary folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kg import EmbedFn, KnowledgeGraph, TripleExtractor
from rag.knowledge.embedding import Embedder
from tests.kg.kg_testdata import CountingEmbed


@pytest.fixture(scope="session")
def embed_fn(embedder: Embedder) -> EmbedFn:
    """The service's own embedding model (tests/conftest.py), as the graph's EmbedFn."""
    return embedder.embed_texts


@pytest.fixture
def counting_embed(embed_fn: EmbedFn) -> CountingEmbed:
    return CountingEmbed(embed_fn)


@pytest.fixture(scope="session")
def extractor() -> TripleExtractor:
    return TripleExtractor()


@pytest.fixture
def graph(tmp_path: Path, counting_embed: CountingEmbed) -> KnowledgeGraph:
    return KnowledgeGraph(tmp_path / "kg", counting_embed)
