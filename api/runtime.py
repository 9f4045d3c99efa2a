"""Everything one warmrag process owns, started and stopped in order.

The API's lifespan creates one ``Runtime``; routes reach its parts through
``api.deps``. Start-up that takes long (model provisioning, vLLM's start, the
sample knowledge base) runs in the background so ``/health`` answers at once and
``/ready`` reports the phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from enum import StrEnum

import anyio
from qdrant_client import QdrantClient

from api.config import Settings
from kg.extract import TripleExtractor
from kg.store import KnowledgeGraph
from kg.subgraph import SubgraphSelector
from rag.chat import ChatEngine
from rag.embedding import Embedder, shared_embedder
from rag.graph_sync import GraphSync
from rag.knowledge_base import KnowledgeBase
from rag.llm import VLLMClient
from rag.metrics import ServiceMetrics
from rag.model import ensure_chat_model
from rag.models import ChangeSet, DocumentIn
from rag.prompt import PromptBuilder
from rag.retriever import Retriever
from rag.sample import load_sample_documents
from rag.vllm_server import VLLMServer
from warmup.scheduler import WarmupScheduler
from warmup.service import WarmupConfig, WarmupService
from warmup.store import WarmupStore
from warmup.warmer import Warmer

log = logging.getLogger(__name__)


class Phase(StrEnum):
    STARTING = "starting"
    PROVISIONING_MODEL = "provisioning_model"
    STARTING_VLLM = "starting_vllm"
    WAITING_FOR_VLLM = "waiting_for_vllm"
    SEEDING_SAMPLE_KB = "seeding_sample_kb"
    WARMING_UP = "warming_up"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


class Runtime:
    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.metrics = ServiceMetrics()
        self.phase = Phase.STARTING
        self.error: str | None = None
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder or shared_embedder()
        self.qdrant = self._open_qdrant()
        self.kb = KnowledgeBase(
            settings.data_dir,
            self.qdrant,
            self.embedder,
            collection=settings.qdrant_collection,
            chunk_tokens=settings.chunk_tokens,
            chunk_overlap_tokens=settings.chunk_overlap_tokens,
        )
        self.vllm_server: VLLMServer | None = None
        if settings.vllm_url is None:
            self.vllm_server = VLLMServer(
                settings.resolved_model_dir,
                settings.served_model_name,
                settings.vllm_port,
                settings.data_dir / "vllm",
                kv_cache_gib=settings.vllm_kv_cache_gib,
                max_model_len=settings.vllm_max_model_len,
                enforce_eager=settings.vllm_enforce_eager,
                dev_mode=settings.vllm_dev_mode,
            )
        vllm_url = settings.vllm_url or self.vllm_server.url  # type: ignore[union-attr]
        self.llm = VLLMClient(vllm_url, settings.served_model_name, settings.llm_timeout_s)
        self.graph = KnowledgeGraph(settings.data_dir / "kg", self.embedder.embed_texts)
        self.graph_sync = GraphSync(
            self.kb, self.graph, TripleExtractor() if settings.kg_extraction else None
        )
        self.graph_sync.reconcile()
        self.selector = SubgraphSelector(
            self.graph, similarity_threshold=settings.kg_similarity_threshold
        )
        self._write_lock = threading.Lock()
        self.builder = PromptBuilder()
        self.retriever = Retriever(self.kb, self.selector, settings.kg_max_triples)
        self.engine = ChatEngine(
            self.retriever,
            self.builder,
            self.llm,
            self.metrics,
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
        )
        self.warmup: WarmupService | None = None
        self.scheduler: WarmupScheduler | None = None
        if settings.warmup_enabled:
            self.warmup = self._build_warmup()
            self.engine.observer = self.warmup
        self._startup: asyncio.Task[None] | None = None
        self.refresh_kb_metrics()

    def _build_warmup(self) -> WarmupService:
        s = self.settings
        config = WarmupConfig(
            strategy=s.warmup_strategy,
            synthetic_queries=s.warmup_synthetic_queries,
            ttl_s=s.warmup_ttl_s,
            half_life_s=s.warmup_half_life_s,
            hot_min_count=s.warmup_hot_min_count,
            steps=s.warmup_steps,
            kv_usage_threshold=s.warmup_kv_usage_threshold,
            max_concurrency=s.warmup_max_concurrency,
            debounce_s=s.warmup_debounce_s,
            restore_max_entries=s.warmup_restore_max_entries,
            budget_share=s.warmup_budget_share,
            document_queries=s.warmup_document_queries,
            top_k=s.top_k,
            context_window=s.vllm_max_model_len,
        )
        warmer = Warmer(
            self.llm, self.engine.activity, self.metrics, max_concurrency=s.warmup_max_concurrency
        )
        store = WarmupStore(s.data_dir / "warmup.sqlite3")
        return WarmupService(
            config, store, self.retriever, self.builder, self.llm, warmer, self.metrics
        )

    def _open_qdrant(self) -> QdrantClient:
        if self.settings.qdrant_url:
            return QdrantClient(url=self.settings.qdrant_url)
        # Local mode: brute-force search, one client per folder (exclusive lock).
        return QdrantClient(path=str(self.settings.qdrant_path))

    @property
    def ready(self) -> bool:
        return self.phase is Phase.READY

    # ----- knowledge-base writes ------------------------------------------------

    def _write(self, operation: Callable[[], ChangeSet]) -> ChangeSet:
        """One write at a time: the KB, then the graph derived from it."""
        with self._write_lock:
            change = operation()
            if change.changed:
                self.graph_sync.apply(change)
        return change

    async def ingest(self, documents: Sequence[DocumentIn]) -> ChangeSet:
        change = await anyio.to_thread.run_sync(self._write, lambda: self.kb.upsert(documents))
        self.on_kb_change(change)
        return change

    async def delete(self, doc_id: str) -> ChangeSet:
        change = await anyio.to_thread.run_sync(self._write, lambda: self.kb.delete(doc_id))
        self.on_kb_change(change)
        return change

    def on_kb_change(self, change: ChangeSet) -> None:
        """Every ingest and delete ends here: metrics now, warmup's detector later."""
        self.metrics.ingested_documents.labels("added").inc(len(change.added))
        self.metrics.ingested_documents.labels("updated").inc(len(change.updated))
        self.metrics.ingested_documents.labels("unchanged").inc(len(change.unchanged))
        self.metrics.ingested_documents.labels("deleted").inc(len(change.deleted))
        self.refresh_kb_metrics()
        if self.warmup is not None:
            self.warmup.notify_change(change)

    def refresh_kb_metrics(self) -> None:
        self.metrics.documents.set(len(self.kb.document_ids()))
        self.metrics.kb_version.set(self.kb.version)

    # ----- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """Begin start-up in the background (call from the event loop)."""
        self._startup = asyncio.create_task(self._start_up(), name="warmrag-startup")

    async def wait_ready(self) -> None:
        if self._startup is not None:
            await asyncio.shield(self._startup)

    async def _start_up(self) -> None:
        try:
            await self._bring_up_llm()
            if self.settings.seed_sample_kb and not self.kb.document_ids():
                self.phase = Phase.SEEDING_SAMPLE_KB
                change = await self.ingest(load_sample_documents())
                log.info("seeded the sample knowledge base: %d documents", len(change.added))
            self.phase = Phase.WARMING_UP
            # Tokenizer and one short forward pass: the first real request should
            # not pay for lazy initialisation.
            await self.llm.prefill(self.builder.prefix([]).messages)
            if self.warmup is not None:
                await self.warmup.start()  # budget, then the hottest persisted entries
                await self.warmup.flush()  # e.g. the sample KB just seeded
                s = self.settings
                self.scheduler = WarmupScheduler(
                    self.warmup,
                    detect_interval_s=s.warmup_detect_interval_s,
                    sweep_interval_s=s.warmup_sweep_interval_s,
                    hot_interval_s=s.warmup_hot_interval_s,
                )
                self.scheduler.start()
            self.phase = Phase.READY
            log.info("warmrag is ready")
        except Exception as exc:  # reported by /ready; the process keeps serving /health
            log.exception("start-up failed")
            self.error = f"{type(exc).__name__}: {exc}"
            self.phase = Phase.FAILED

    async def _bring_up_llm(self) -> None:
        server = self.vllm_server
        if server is not None:
            self.phase = Phase.PROVISIONING_MODEL
            await anyio.to_thread.run_sync(ensure_chat_model, self.settings.resolved_model_dir)
            self.phase = Phase.STARTING_VLLM
            server.start()
            await anyio.to_thread.run_sync(server.wait_ready, self.settings.vllm_startup_timeout_s)
            return
        self.phase = Phase.WAITING_FOR_VLLM
        with anyio.fail_after(self.settings.vllm_startup_timeout_s):
            while not await self.llm.is_healthy():
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        if self._startup is not None and not self._startup.done():
            self._startup.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._startup
        if self.scheduler is not None:
            self.scheduler.shutdown()
        if self.warmup is not None:
            await self.warmup.aclose()
            self.warmup.store.close()
        await self.llm.aclose()
        if self.vllm_server is not None:
            await anyio.to_thread.run_sync(self.vllm_server.stop)
        self.qdrant.close()
        self.phase = Phase.STOPPED
