"""A data folder written by the build before ``rag/`` became subpackages opens with this one.

The fixture, ``tests/data/old-data-folder`` (its README says how it was made), is an
embedded-mode folder that commit a0492f6 wrote through its own ``Runtime``: three
documents with supplied and extracted triples (one of them replaced, a fourth added and
deleted: KB version 4) and a warm registry with one entry. It is opened here, on a copy,
with what the service opens its folder with: ``api.stores.build_knowledge`` for the
knowledge base and its graph, ``WarmupStore`` for the registry. Its Qdrant local-mode
folder and ``docstore.json`` move into a Qdrant Edge shard and ``kb.sqlite3`` on that
first open, and are kept renamed; so do the graph's ``graph.json``, embeddings and
synced versions, into ``kg/graph.sqlite3``. Real stores and embedder; no LLM (what is checked is
on disk).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from api.config import Settings
from api.stores import build_knowledge
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn, EmbeddingPrecision
from rag.knowledge.passages import text_hash
from rag.knowledge.service import KnowledgeService
from warmup.store import WarmupStore

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "old-data-folder"
DOC_IDS = ["bridges/aster", "lighthouse", "rivers/zorn.md"]
KB_VERSION = 4
#: As the old build ingested it: the same content hash, so unchanged on re-ingest.
ZORN = DocumentIn(
    id="rivers/zorn.md",
    text="# The river Zorn\n\nThe river Zorn is green and flows through Kellerby. "
    "Its water is cold all year.",
    metadata={"title": "The river Zorn"},
    triples=[["Zorn", "flows through", "Kellerby"]],
)
NEW = DocumentIn(
    id="ferries/ostfeld",
    text="The Ostfeld ferry carries wool across the Zorn to Kellerby every morning.",
    triples=[["Ostfeld ferry", "carries", "wool"]],
)


def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, seed_sample_kb=False, kg_extraction=True)


def opened(data_dir: Path, embedder: Embedder) -> KnowledgeService:
    knowledge = build_knowledge(settings(data_dir), embedder)
    knowledge.open()  # and repair: the graph re-synced where it is out of step
    return knowledge


def top(knowledge: KnowledgeService, question: str) -> tuple[str, str]:
    kb = knowledge.kb
    best = kb.retrieve(kb.embedder.embed_query(question), 3)[0]
    return best.doc_id, best.text


def facts(knowledge: KnowledgeService, doc_id: str) -> list[list[str]]:
    return [t.as_list() for t in knowledge.graph_sync.graph.triples_for_document(doc_id)]


async def check_old_folder(data_dir: Path, embedder: Embedder) -> None:
    knowledge = opened(data_dir, embedder)
    moved = ["edge", "kb.sqlite3", "qdrant.migrated", "docstore.json.migrated"]
    moved += ["kg/graph.sqlite3", "kg/graph.json.migrated", "kg/synced_documents.json.migrated"]
    assert all((data_dir / name).exists() for name in moved)
    assert not (data_dir / "qdrant").exists() and not (data_dir / "docstore.json").exists()
    assert not (data_dir / "kg" / "graph.json").exists()
    try:
        kb, graph = knowledge.kb, knowledge.graph_sync.graph
        assert kb.document_ids() == DOC_IDS
        assert kb.version == KB_VERSION
        assert kb.count_chunks() == 3  # one chunk each: the replaced and deleted ones are gone
        doc_id, text = top(knowledge, "What was the lighthouse of Ostfeld built from?")
        assert doc_id == "lighthouse" and "paraffin" in text  # the replacement's text
        assert top(knowledge, "Which river flows through Kellerby?")[0] == "rivers/zorn.md"
        assert graph.document_ids() == DOC_IDS
        assert ["Zorn", "flows through", "Kellerby"] in facts(knowledge, "rivers/zorn.md")
        assert ["lamp", "burn", "paraffin"] in facts(knowledge, "lighthouse")  # extracted
        assert knowledge.graph_sync.reconcile() == 0  # the graph was in step already

        store = WarmupStore(data_dir / "warmup.sqlite3")
        try:
            [entry] = store.load().entries
        finally:
            store.close()
        assert entry.doc_ids == DOC_IDS
        current = {cid: text_hash(t) for d in DOC_IDS for cid, t in kb.chunk_texts(d)}
        assert [current.get(c) for c in entry.chunk_ids] == entry.content_hashes

        again = await knowledge.ingest([ZORN])  # the same content hash: nothing re-embedded
        assert again.unchanged == [ZORN.id] and kb.version == KB_VERSION

        change = await knowledge.ingest([NEW])
        assert change.added == [NEW.id] and change.kb_version == KB_VERSION + 1
    finally:
        knowledge.close()

    knowledge = opened(data_dir, embedder)  # and the folder opens again
    try:
        assert knowledge.kb.document_ids() == sorted([*DOC_IDS, NEW.id])
        assert knowledge.kb.version == KB_VERSION + 1
        assert top(knowledge, "What does the ferry carry to Kellerby?")[0] == NEW.id
        assert ["Ostfeld ferry", "carries", "wool"] in facts(knowledge, NEW.id)
        assert knowledge.graph_sync.reconcile() == 0
    finally:
        knowledge.close()


def test_a_data_folder_of_the_old_layout_opens_and_takes_writes(tmp_path: Path) -> None:
    """The old folder records no embedder: its vectors are float32's, so an embedder
    left to the default follows float32 whatever the host's default. It is one of its
    own, so that the session's shared embedder keeps the host's default."""
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURE, data_dir)
    embedder = Embedder()
    asyncio.run(check_old_folder(data_dir, embedder))
    assert embedder.precision is EmbeddingPrecision.FLOAT32
