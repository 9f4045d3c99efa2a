"""The write path (``KnowledgeService``) on a real knowledge base, graph and spaCy: with
``parse_beside`` an ingest's chunks are parsed for the graph while they are embedded, the
graph gets what parsing after the commit would give, and a write that fails leaves both
stores as they were; without it (the default) the parse follows the commit."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import numpy as np
import pytest

from kg import KnowledgeGraph, TripleExtractor
from kg.models import Triple
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder
from rag.knowledge.graph_sync import GraphSync, ParsedAhead
from rag.knowledge.models import DocumentIn
from rag.knowledge.service import KnowledgeService
from tests.rag.knowledge.test_graph_sync import DOCS, kb  # noqa: F401  (the fixture)

#: How long the chunks' embedding waits for the parse to begin beside it.
BESIDE_S = 20.0


class WatchedExtractor(TripleExtractor):
    """Records each ``extract_documents`` call's documents and thread; sets ``started``
    as one begins; ``fail_first`` makes the first call fail (injected)."""

    def __init__(self, fail_first: bool = False) -> None:
        super().__init__()
        self.calls: list[tuple[list[str], str]] = []
        self.started = threading.Event()
        self.finished = threading.Event()
        self.fail_first = fail_first

    def extract_documents(
        self, documents: Mapping[str, Sequence[tuple[str, str]]]
    ) -> dict[str, list[Triple]]:
        self.calls.append((list(documents), threading.current_thread().name))
        self.started.set()
        try:
            if self.fail_first and len(self.calls) == 1:
                raise RuntimeError("injected: the parser failed")
            return super().extract_documents(documents)
        finally:
            self.finished.set()


def service(
    base: KnowledgeBase,
    embedder: Embedder,
    folder: Path,
    extractor: TripleExtractor,
    parse_beside: bool = True,
) -> KnowledgeService:
    graph = KnowledgeGraph(folder / "kg", embedder.embed_texts)
    return KnowledgeService(base, GraphSync(base, graph, extractor), parse_beside=parse_beside)


def triples(sync: GraphSync, doc_id: str) -> list[list[str]]:
    return [t.as_list() for t in sync.graph.triples_for_document(doc_id)]


def test_an_ingest_parses_its_chunks_while_it_embeds_them(
    kb: KnowledgeBase,  # noqa: F811
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extractor = WatchedExtractor()
    knowledge = service(kb, embedder, tmp_path, extractor)
    embed = embedder.embed_texts
    beside: list[bool] = []

    def embed_chunks(texts: Sequence[str]) -> np.ndarray:
        if not beside:  # the first call is the chunks': the parse has begun by then
            beside.append(extractor.started.wait(BESIDE_S))
        return embed(texts)

    monkeypatch.setattr(embedder, "embed_texts", embed_chunks)
    change = anyio.run(knowledge.ingest, DOCS)
    monkeypatch.undo()
    assert beside == [True]
    assert [(docs, thread.split("_")[0]) for docs, thread in extractor.calls] == [
        (["curie", "paris"], "kg-parse")
    ]
    assert change.added == ["curie", "paris"] and change.new_facts
    for doc in DOCS:  # what parsing the committed chunks gives
        parsed = knowledge.graph_sync.triples_of_documents({doc.id: kb.chunk_texts(doc.id)})
        assert triples(knowledge.graph_sync, doc.id) == [t.as_list() for t in parsed[doc.id]]
    assert triples(knowledge.graph_sync, "curie")[0] == ["Marie Curie", "win", "Nobel Prize"]
    assert knowledge.graph_sync.reconcile() == 0
    knowledge.close()


def test_an_update_is_parsed_ahead_in_the_order_its_change_lists_it(
    kb: KnowledgeBase,  # noqa: F811
    embedder: Embedder,
    tmp_path: Path,
) -> None:
    """The parse ahead streams the documents as the sync would (added, then updated),
    so its batches, and so its triples, are the ones the sync would make."""
    extractor = WatchedExtractor()
    knowledge = service(kb, embedder, tmp_path, extractor)
    anyio.run(knowledge.ingest, DOCS[:1])
    updated = DocumentIn(id="curie", text="Marie Curie was born in Warsaw in 1867.")
    new = DocumentIn(id="eiffel", text="Gustave Eiffel built the tower in Paris.")
    change = anyio.run(knowledge.ingest, [updated, new])
    assert (change.added, change.updated) == (["eiffel"], ["curie"])
    assert [docs for docs, _ in extractor.calls] == [["curie"], ["eiffel", "curie"]]
    assert list(change.chunk_texts) == ["eiffel", "curie"]
    assert ["Gustave Eiffel", "build", "tower"] in triples(knowledge.graph_sync, "eiffel")
    knowledge.close()


def test_chunks_that_are_not_the_ones_parsed_ahead_are_parsed_again(
    kb: KnowledgeBase,  # noqa: F811
    embedder: Embedder,
    tmp_path: Path,
) -> None:
    extractor = WatchedExtractor()
    sync = GraphSync(kb, KnowledgeGraph(tmp_path / "kg", embedder.embed_texts), extractor)
    ahead = sync.parse_ahead({"curie": [("c0", "Marie Curie was born in Warsaw.")]})
    assert isinstance(ahead, ParsedAhead)
    other = {"curie": [("c0", "Marie Curie discovered polonium.")]}
    found = sync.triples_of_documents(other, ahead)
    assert [t.as_list() for t in found["curie"]] == [["Marie Curie", "discover", "polonium"]]
    assert [docs for docs, _ in extractor.calls] == [["curie"], ["curie"]]
    sync.close()


def test_a_parse_ahead_that_fails_is_parsed_again_after_the_commit(
    kb: KnowledgeBase,  # noqa: F811
    embedder: Embedder,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    extractor = WatchedExtractor(fail_first=True)
    knowledge = service(kb, embedder, tmp_path, extractor)
    anyio.run(knowledge.ingest, DOCS)
    threads = [thread.split("_")[0] for _, thread in extractor.calls]
    assert threads == ["kg-parse", "AnyIO worker thread"]
    assert "parsing ahead failed" in caplog.text
    assert ["Marie Curie", "born in", "Warsaw"] in triples(knowledge.graph_sync, "curie")
    assert knowledge.graph_sync.reconcile() == 0
    knowledge.close()


def test_an_ingest_whose_embedding_fails_stores_nothing_and_the_next_one_works(
    kb: KnowledgeBase,  # noqa: F811
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Injected: the embedding model fails while the parse ahead runs. The ingest
    raises, neither store holds the documents, and the parse is over before the error
    reaches the caller (the next write's parse never queues behind it)."""
    extractor = WatchedExtractor()
    knowledge = service(kb, embedder, tmp_path, extractor)
    embed = embedder.embed_texts

    def failing(texts: Sequence[str]) -> np.ndarray:
        extractor.started.wait(BESIDE_S)
        raise RuntimeError("injected: the embedding model failed")

    monkeypatch.setattr(embedder, "embed_texts", failing)
    with pytest.raises(RuntimeError, match="embedding model failed"):
        anyio.run(knowledge.ingest, DOCS)
    assert extractor.finished.is_set()
    assert kb.document_ids() == [] and knowledge.graph_sync.graph.document_ids() == []
    monkeypatch.setattr(embedder, "embed_texts", embed)
    change = anyio.run(knowledge.ingest, DOCS)
    assert change.added == ["curie", "paris"]
    assert knowledge.graph_sync.graph.document_ids() == ["curie", "paris"]
    knowledge.close()


def test_by_default_the_parse_follows_the_commit_in_the_writes_thread(
    kb: KnowledgeBase,  # noqa: F811
    embedder: Embedder,
    tmp_path: Path,
) -> None:
    extractor = WatchedExtractor()
    graph = KnowledgeGraph(tmp_path / "kg", embedder.embed_texts)
    knowledge = KnowledgeService(kb, GraphSync(kb, graph, extractor))
    assert not knowledge.parse_beside
    anyio.run(knowledge.ingest, DOCS)
    assert [(docs, thread.split("_")[0]) for docs, thread in extractor.calls] == [
        (["curie", "paris"], "AnyIO worker thread")
    ]
    assert ["Marie Curie", "born in", "Warsaw"] in triples(knowledge.graph_sync, "curie")
    knowledge.close()
