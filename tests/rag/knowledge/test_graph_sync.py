"""GraphSync on a real knowledge base: a change's documents are parsed together, and the
graph holds what parsing each document alone would give."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from kg import KnowledgeGraph, TripleExtractor
from kg.models import Triple
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder
from rag.knowledge.graph_sync import GraphSync
from rag.knowledge.models import DocumentIn

DOCS = [
    DocumentIn(
        id="curie",
        text="Marie Curie was born in Warsaw. Marie Curie discovered polonium.",
        triples=[["Marie Curie", "win", "Nobel Prize"]],
    ),
    DocumentIn(id="paris", text="Paris is the capital of France. Gustave Eiffel built towers."),
]


class CountingExtractor(TripleExtractor):
    """Records which documents each ``extract_documents`` call parsed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def extract_documents(
        self, documents: Mapping[str, Sequence[tuple[str, str]]]
    ) -> dict[str, list[Triple]]:
        self.calls.append(list(documents))
        return super().extract_documents(documents)


@pytest.fixture
def kb(tmp_path: Path, embedder: Embedder) -> Iterator[KnowledgeBase]:
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    yield KnowledgeBase(tmp_path, client, embedder, chunk_tokens=128)
    client.close()


def test_a_change_is_parsed_in_one_stream(
    kb: KnowledgeBase, embedder: Embedder, tmp_path: Path
) -> None:
    extractor = CountingExtractor()
    sync = GraphSync(kb, KnowledgeGraph(tmp_path / "kg", embedder.embed_texts), extractor)
    sync.apply(kb.upsert(DOCS))
    assert extractor.calls == [["curie", "paris"]]
    for doc in DOCS:
        alone = [t.as_list() for t in sync.triples_of(doc.id)]
        assert [t.as_list() for t in sync.graph.triples_for_document(doc.id)] == alone
    curie = sync.graph.triples_for_document("curie")
    assert curie[0].source == "supplied"  # supplied first, then the extracted ones
    assert ["Marie Curie", "born in", "Warsaw"] in [t.as_list() for t in curie]
    assert sync.reconcile() == 0  # the graph reflects every document version
