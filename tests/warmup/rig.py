"""The warmup layer wired as the runtime wires it, on a real knowledge base (Qdrant
local mode and the real embedding model in a test folder), with ``FakeEngine`` in
vLLM's place and a clock the test moves. Built inside the test's event loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from qdrant_client import QdrantClient

from api.metrics import ServiceMetrics
from rag.chat.engine import ChatActivity, ChatEngine
from rag.chat.memo import ContextMemo
from rag.chat.prompt import PromptBuilder, PromptShape
from rag.chat.query import normalize_query
from rag.chat.results import ChatResult
from rag.chat.retriever import Retriever
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import ChangeSet, DocumentIn
from rag.llm.kv_events import KVEventsEndpoint, KVEventSubscriber
from tests.fakes import FakeEngine, FakeHasher, apply_fake_batch, tokens_of
from warmup.budget import ChatShape
from warmup.models import WarmEntry
from warmup.residency import ResidencyIndex
from warmup.service import WarmupService
from warmup.settings import WarmupSettings
from warmup.store import WarmupStore
from warmup.tracker import ResidencyTracker
from warmup.warmer import Warmer


def topic(doc_id: str, subject: str, fact: str) -> DocumentIn:
    filler = " ".join(f"{subject} is in record {i}." for i in range(3))
    return DocumentIn(id=doc_id, text=f"{fact} {filler}")


# Three documents per subject, so every question's top-3 is on its own subject.
SUBJECTS = {
    "zorn": ("The river Zorn", ["is green", "has trout", "has bridges"]),
    "mars": ("The planet Mars", ["has two moons", "looks red", "has long years"]),
    "rye": ("Rye bread", ["is sour", "has a dark crust", "keeps a week"]),
    "piano": ("The grand piano", ["has 88 keys", "has three pedals", "is black"]),
    "tea": ("Green tea", ["is steamed", "comes from Japan", "is bitter"]),
    "owl": ("The snowy owl", ["is white", "hunts lemmings", "lives in the Arctic"]),
}


def subject_docs(name: str) -> list[DocumentIn]:
    subject, facts = SUBJECTS[name]
    return [topic(f"{name}-{i}", subject, f"{subject} {fact}.") for i, fact in enumerate(facts)]


DOCS = [doc for name in SUBJECTS for doc in subject_docs(name)]
QUESTIONS = {name: f"What do we know about {subject.lower()}?" for name, (subject, _) in
             SUBJECTS.items()}  # fmt: skip


@dataclass
class Rig:
    kb: KnowledgeBase
    engine: FakeEngine
    metrics: ServiceMetrics
    chat: ChatEngine
    service: WarmupService
    memo: ContextMemo
    now: list[float]

    async def ingest(self, *docs: DocumentIn) -> ChangeSet:
        change = await anyio.to_thread.run_sync(self.kb.upsert, list(docs))
        self.changed(change)
        return change

    async def delete(self, doc_id: str) -> ChangeSet:
        change = await anyio.to_thread.run_sync(self.kb.delete, doc_id)
        self.changed(change)
        return change

    def changed(self, change: ChangeSet) -> None:
        """What the service's change listener does: the memo forgets, warmup queues."""
        self.memo.forget([change])
        self.service.notify_change(change)

    async def ask(self, question: str) -> ChatResult:
        return await self.chat.answer(question)

    def entry_for(self, question_name: str) -> WarmEntry:
        """The one warm entry that holds this subject's question."""
        key = normalize_query(QUESTIONS[question_name])
        entries = [e for e in self.service.registry.entries() if key in e.queries]
        assert len(entries) == 1, [e.queries for e in self.service.registry.entries()]
        return entries[0]

    def prefilled(self, entry: WarmEntry) -> int:
        """How many prefills sent exactly this entry's messages."""
        tokens = tokens_of(entry.messages, generation_prompt=False)
        return sum(1 for p in self.engine.prefills if p == tokens)

    def counter(self, name: str) -> float:
        value = self.metrics.registry.get_sample_value(name)
        return float(value or 0.0)

    async def close(self) -> None:
        await self.service.aclose()
        self.service.close()
        await anyio.to_thread.run_sync(self.kb.close)


def fake_residency(engine: FakeEngine) -> ResidencyTracker:
    """A residency tracker fed by ``engine``'s KV events, as the runtime wires one per
    vLLM server (here the events are delivered on the loop, not a thread)."""
    index = ResidencyIndex()
    tracker = ResidencyTracker(engine.prefix_token_ids, FakeHasher)
    tracker.attach(None, index)
    engine.events = KVEventSubscriber(
        KVEventsEndpoint("inproc://fake"), index, decode=lambda batch: batch,
        apply=apply_fake_batch,
    )  # fmt: skip
    return tracker


async def make_rig(
    folder: Path,
    embedder: Embedder,
    engine: FakeEngine | None = None,
    *,
    events: bool = False,
    **settings: Any,
) -> Rig:
    """The warmup layer on ``folder`` (a second rig on the same folder is a restart),
    opened and started. ``events``: the engine publishes KV events to a residency
    index. ``settings``: ``WarmupSettings`` fields."""
    engine = engine or FakeEngine(num_blocks=4096)
    now = [1_000_000.0]
    kb = KnowledgeBase(
        folder, lambda: QdrantClient(path=str(folder / "qdrant")), embedder, load=False
    )
    await anyio.to_thread.run_sync(kb.open)
    metrics = ServiceMetrics()
    builder = PromptBuilder()
    retriever = Retriever(kb)
    memo = ContextMemo()
    activity = ChatActivity()
    warmer = Warmer(engine, activity, metrics.warmup, quiet_s=0.0)
    service = WarmupService(
        # Predicted questions (on by default) would warm every ingested document;
        # test_predict turns them on.
        WarmupSettings(**{"debounce_s": 3600.0, "document_queries": False, **settings}),
        WarmupStore(folder / "warmup.sqlite3", load=False),
        retriever,
        builder,
        engine,
        warmer,
        metrics.warmup,
        top_k=3,
        chat_shape=ChatShape(4096, PromptShape(passages=3, passage_wordpieces=200, triples=3), 8),
        memo=memo,
        tracker=fake_residency(engine) if events else None,
        clock=lambda: now[0],
    )
    chat = ChatEngine(
        retriever,
        builder,
        engine,
        metrics.chat,
        max_tokens=8,
        memo=memo,
        observer=service,
        activity=activity,
    )
    await anyio.to_thread.run_sync(service.open)
    await service.start()
    return Rig(kb, engine, metrics, chat, service, memo, now)
