"""GraphSync on a real knowledge base: a change's documents are parsed together, from the
texts the change carries, and the graph holds what parsing each document alone would
give; a graph left behind is rebuilt from the knowledge base."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
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
        parsed = sync.triples_of_documents({doc.id: kb.chunk_texts(doc.id)})
        alone = [t.as_list() for t in parsed[doc.id]]
        assert [t.as_list() for t in sync.graph.triples_for_document(doc.id)] == alone
    curie = sync.graph.triples_for_document("curie")
    assert curie[0].source == "supplied"  # supplied first, then the extracted ones
    assert ["Marie Curie", "born in", "Warsaw"] in [t.as_list() for t in curie]
    assert sync.reconcile() == 0  # the graph reflects every document version


def test_a_change_is_applied_from_its_own_texts(
    kb: KnowledgeBase, embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = GraphSync(kb, KnowledgeGraph(tmp_path / "kg", embedder.embed_texts), TripleExtractor())
    change = kb.upsert(DOCS)
    assert change.chunk_texts == {d.id: kb.chunk_texts(d.id) for d in DOCS}
    assert "chunk_texts" not in change.model_dump()  # never serialized (warmup's store)

    def unread(doc_id: str) -> list[tuple[str, str]]:
        raise AssertionError(f"{doc_id}'s chunks were read back from the knowledge base")

    monkeypatch.setattr(kb, "chunk_texts", unread)
    sync.apply(change)
    monkeypatch.undo()
    assert ["Marie Curie", "born in", "Warsaw"] in [
        t.as_list() for t in sync.graph.triples_for_document("curie")
    ]


def test_a_change_notes_the_facts_the_graph_did_not_hold_before(
    kb: KnowledgeBase, embedder: Embedder, tmp_path: Path
) -> None:
    """What the change rule tests: an updated document's unchanged facts are not new
    (they were candidates of every retrieval since), the one it adds is."""
    sync = GraphSync(kb, KnowledgeGraph(tmp_path / "kg", embedder.embed_texts), TripleExtractor())
    first = kb.upsert(DOCS)
    sync.apply(first)
    texts = {t.text for d in DOCS for t in sync.graph.triples_for_document(d.id)}
    assert first.new_facts is not None and len(first.new_facts) == len(texts) >= 4
    text = f"{DOCS[1].text} Gustave Eiffel designed bridges."
    change = kb.upsert([DocumentIn(id="paris", text=text)])
    sync.apply(change)
    added = embedder.embed_texts(["Gustave Eiffel design bridges"])
    assert change.new_facts is not None and len(change.new_facts) == 1
    assert float(np.dot(change.new_facts[0], added[0])) > 0.999
    deleted = kb.delete("curie")
    sync.apply(deleted)
    assert deleted.new_facts == []


def test_a_graph_left_behind_is_rebuilt_from_the_knowledge_base(
    kb: KnowledgeBase, embedder: Embedder, tmp_path: Path
) -> None:
    """A crash after the KB committed and before the graph was written (no change to
    apply), and a change applied after a later write replaced its documents: both end
    with the graph of what the KB holds now."""
    sync = GraphSync(kb, KnowledgeGraph(tmp_path / "kg", embedder.embed_texts), TripleExtractor())
    kb.upsert(DOCS)  # never applied: the crash
    assert sync.reconcile() == 2
    assert ["Gustave Eiffel", "build", "towers"] in [
        t.as_list() for t in sync.graph.triples_for_document("paris")
    ]
    old = kb.upsert([DocumentIn(id="paris", text="Paris is the capital of France.")])
    kb.upsert([DocumentIn(id="paris", text="Lyon lies on the Rhone. Lyon hosts a festival.")])
    sync.apply(old)  # stale: its texts are no longer the KB's, which it reads instead
    paris = [t.as_list() for t in sync.graph.triples_for_document("paris")]
    assert ["Lyon", "lie on", "Rhone"] in paris and [
        "Paris",
        "be capital of",
        "France",
    ] not in paris
    assert sync.reconcile() == 0


class FailingGraph(KnowledgeGraph):
    """Fails its ``fail_at``-th write (counting from 1), as a crash part-way would."""

    def __init__(self, *args: object, fail_at: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.writes = 0
        self.fail_at = fail_at

    def replace_documents(self, *args: object, **kwargs: object) -> np.ndarray:
        self.writes += 1
        if self.writes == self.fail_at:
            raise OSError("injected: the disk failed during the re-sync's second batch")
        return super().replace_documents(*args, **kwargs)  # type: ignore[arg-type]


def test_a_start_resyncs_in_batches_with_progress_and_resumes_after_a_crash(
    kb: KnowledgeBase, embedder: Embedder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Five documents the graph never saw, re-synced two at a time: the second batch's
    write fails; the first batch is kept, and the next start re-syncs only the rest."""
    docs = [DocumentIn(id=f"town-{i}", text=f"Town {i} lies on the river Aa{i}.") for i in range(5)]
    kb.upsert(docs)  # never applied to the graph
    extractor = CountingExtractor()
    failing = FailingGraph(tmp_path / "kg", embedder.embed_texts, fail_at=2)
    sync = GraphSync(kb, failing, extractor)
    caplog.set_level("INFO", logger="rag.knowledge.graph_sync")
    with pytest.raises(OSError, match="injected"):
        sync.reconcile(batch=2)
    assert extractor.calls == [["town-0", "town-1"], ["town-2", "town-3"]]
    failing.close()
    extractor.calls.clear()
    sync = GraphSync(kb, KnowledgeGraph(tmp_path / "kg", embedder.embed_texts), extractor)
    assert sync.reconcile(batch=2) == 3
    assert extractor.calls == [["town-2", "town-3"], ["town-4"]]
    progress = [r.getMessage() for r in caplog.records if "re-synced" in r.getMessage()]
    assert progress[0].startswith("knowledge graph: re-synced 2 of 5 documents")
    assert progress[-1].startswith("knowledge graph: re-synced 2 of 3 documents")
    assert sync.reconcile(batch=2) == 0
    assert sorted(sync.graph.document_versions()) == [d.id for d in docs]
