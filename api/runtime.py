"""The composition root: every part of one warmrag process, built and wired here.

``Runtime(settings)`` only builds objects; it reads no file and opens no store.
``open`` (in the app's lifespan, before the first request) opens the stores and
repairs what a crash left; ``start`` brings vLLM up in the background so
``/health`` answers at once and ``/ready`` reports the phase; ``stop`` undoes both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from enum import StrEnum

import anyio

from api.collector import freeze_start_up_heap
from api.config import Settings
from api.folder_lock import DataFolderLock
from api.metrics import ServiceMetrics
from api.replicas import ReplicaWatch, build_llm, probe_all
from api.residency import Residency, build_residency, child_endpoint
from api.retrieval import build_read_path
from api.stores import build_knowledge
from rag.chat.bad_cases import BadCaseLog
from rag.chat.engine import ChatActivity, ChatEngine
from rag.chat.memo import ContextMemo
from rag.chat.prompt import PromptBuilder, PromptShape
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.files import load_sample_documents
from rag.knowledge.models import ChangeSet
from rag.llm.alignment import BlockAligner, VLLMTokenCounter
from rag.llm.bundled_model import ensure_chat_model
from rag.llm.client import LLMEngine
from rag.llm.cpu import CpuFeatures, VLLMCpuPlan, plan_for
from rag.llm.pool import ReplicaPool
from rag.llm.probe import VLLMSetupError
from rag.llm.server import VLLMNotInstalledError, VLLMServer, require_vllm_cpu
from rag.llm.supervisor import VLLMSupervisor
from warmup.budget import ChatShape
from warmup.scheduler import WarmupScheduler
from warmup.service import WarmupService
from warmup.store import WarmupStore
from warmup.warmer import Warmer

log = logging.getLogger(__name__)

#: Start-up errors whose message is written for the operator (/ready shows it).
_SAY_WHY: tuple[type[Exception], ...] = (VLLMNotInstalledError, VLLMSetupError)


class Phase(StrEnum):
    STARTING = "starting"
    PROVISIONING_MODEL = "provisioning_model"
    STARTING_VLLM = "starting_vllm"
    WAITING_FOR_VLLM = "waiting_for_vllm"
    SEEDING_SAMPLE_KB = "seeding_sample_kb"
    WARMING_UP = "warming_up"
    READY = "ready"
    VLLM_RESTARTING = "vllm_restarting"
    FAILED = "failed"
    STOPPED = "stopped"


class Runtime:
    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        llm: LLMEngine | None = None,
        metrics: ServiceMetrics | None = None,
        freeze_heap: bool = False,
    ) -> None:
        """Build every part; no I/O (``open`` and ``start`` do that).

        ``llm`` replaces the vLLM client (and no child is launched): tests pass a fake.
        ``metrics``: the app's registry, which its HTTP instrumentation shares.
        ``freeze_heap``: ``open`` moves what the process holds once its models and vLLM's
        hashing code are loaded, before the stores open, out of the cyclic collector's
        walk (``api.collector``); for the process that serves, not for tests.
        """
        self.settings = s = settings
        self._freeze_heap = freeze_heap
        self.metrics = metrics or ServiceMetrics()
        self.phase = Phase.STARTING
        self.error: str | None = None
        self.embedder = embedder or shared_embedder(
            s.embedding_precision, s.embedding_default, s.question_default
        )
        self.folder_lock = DataFolderLock(s.data_dir, "the service")

        self.knowledge = build_knowledge(s, self.embedder)
        self.kb = self.knowledge.kb
        self.graph = self.knowledge.graph_sync.graph
        self.knowledge.add_listener(self._on_kb_change)
        read_path = build_read_path(s, self.knowledge, self.embedder)
        self.selector = read_path.selector
        self.retriever = read_path.retriever

        self.cpu_plan: VLLMCpuPlan | None = None
        self.vllm_server: VLLMServer | None = None
        self.supervisor: VLLMSupervisor | None = None
        if llm is None and s.vllm_url is None:
            self.cpu_plan = plan_for(
                CpuFeatures.read(),
                dtype=None if s.vllm_dtype == "auto" else s.vllm_dtype,
                enforce_eager=s.vllm_enforce_eager,
            )
            events = (
                child_endpoint(s.data_dir / "vllm")
                if s.vllm_kv_events and s.warmup.enabled and s.warmup.residency
                else None
            )
            self.vllm_server = VLLMServer(
                s.resolved_model_dir,
                s.served_model_name,
                s.vllm_port,
                s.data_dir / "vllm",
                kv_cache_gib=s.vllm_kv_cache_gib,
                max_model_len=s.vllm_max_model_len,
                enforce_eager=self.cpu_plan.enforce_eager,
                dev_mode=s.vllm_dev_mode,
                dtype=self.cpu_plan.dtype,
                log_max_bytes=s.vllm_log_max_mib * 1024 * 1024,
                extra_args=s.vllm_extra_argv,
                kv_events=events,
            )
            self.supervisor = VLLMSupervisor(
                self.vllm_server,
                startup_timeout_s=s.vllm_startup_timeout_s,
                on_down=self._on_vllm_down,
                on_restarted=self._on_vllm_restarted,
                backoff_max_s=s.vllm_restart_backoff_max_s,
            )
        urls = s.vllm_urls or [self.vllm_server.url if self.vllm_server else ""]
        self.llm: LLMEngine = llm or build_llm(s, urls, self.metrics.replicas)
        self.pool = self.llm if isinstance(self.llm, ReplicaPool) else None
        self.residency: Residency | None = (
            build_residency(s, self.llm, self.vllm_server.kv_events if self.vllm_server else None)
            if s.warmup.enabled and llm is None
            else None
        )
        # The aligner learns vLLM's block size from vLLM itself once it is up.
        aligner = (
            BlockAligner(VLLMTokenCounter(urls[0], s.served_model_name))
            if s.prefix_block_align and urls[0]
            else None
        )
        self.builder = PromptBuilder(aligner=aligner, order=s.passage_order)

        self.memo = ContextMemo(s.context_memo_max_entries, rule=read_path.rule)
        self.bad_cases = BadCaseLog(s.bad_case_ttft_ms, s.bad_case_max_entries)
        self.activity = ChatActivity()
        self.warmup: WarmupService | None = self._build_warmup() if s.warmup.enabled else None
        self.scheduler: WarmupScheduler | None = None
        self.engine = ChatEngine(
            self.retriever,
            self.builder,
            self.llm,
            self.metrics.chat,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            frequency_penalty=s.chat_frequency_penalty,
            stop_on_repeat=s.chat_stop_on_repeat,
            deadline_s=s.chat_deadline_s,
            available=self._llm_available,
            memo=self.memo,
            memo_top_k=s.top_k,
            bad_cases=self.bad_cases,
            observer=self.warmup,
            activity=self.activity,
        )
        self.replica_watch: ReplicaWatch | None = None
        if self.pool is not None:
            self.replica_watch = ReplicaWatch(
                self.pool, self.warmup, interval_s=s.replica_health_interval_s
            )
        self._startup: asyncio.Task[None] | None = None
        self._supervision: asyncio.Task[None] | None = None
        self._watching: asyncio.Task[None] | None = None

    def _build_warmup(self) -> WarmupService:
        s = self.settings
        warmer = Warmer(
            self.llm,
            self.activity,
            self.metrics.warmup,
            max_concurrency=s.warmup.max_concurrency,
            busy_share=s.warmup.busy_share,
        )
        store = WarmupStore(s.data_dir / "warmup.sqlite3", load=False)
        return WarmupService(
            s.warmup,
            store,
            self.retriever,
            self.builder,
            self.llm,
            warmer,
            self.metrics.warmup,
            top_k=s.top_k,
            chat_shape=ChatShape(
                context_window=s.vllm_max_model_len,
                prompt=PromptShape(
                    passages=s.top_k,
                    passage_wordpieces=max(s.chunk_tokens, s.passage_window_tokens),
                    triples=s.kg_max_triples,
                ),
                answer_tokens=s.max_tokens,
            ),
            memo=self.memo,
            tracker=self.residency.tracker if self.residency else None,
        )

    @property
    def ready(self) -> bool:
        return self.phase is Phase.READY

    def _llm_available(self) -> bool:
        return self.phase is not Phase.VLLM_RESTARTING

    # ----- knowledge-base changes -----------------------------------------------------

    def _on_kb_change(self, change: ChangeSet) -> None:
        """Every ingest and delete ends here: metrics now, warmup's detector later."""
        self.metrics.knowledge.record_change(change)
        self.refresh_kb_metrics()
        self.memo.forget([change])  # the contexts the change can have moved
        if self.warmup is not None:
            self.warmup.notify_change(change)

    def refresh_kb_metrics(self) -> None:
        self.metrics.knowledge.record_size(self.kb.document_count(), self.kb.version)

    # ----- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        """Open the stores (embedding model, Qdrant, docstore, graph, warm registry)."""
        await anyio.to_thread.run_sync(self._open_stores)
        self.refresh_kb_metrics()

    def _open_stores(self) -> None:
        # First: the folder is this process's (or DataFolderInUseError) before any
        # store in it is opened or repaired.
        self.folder_lock.acquire()
        try:
            self.embedder.warm_up()
            if self.residency is not None:
                self.residency.tracker.warm_up()  # vLLM's config modules: 4,000 imports
            if self._freeze_heap:
                freeze_start_up_heap()
            self.knowledge.open()
            if self.warmup is not None:
                self.warmup.open()  # the store, and the registry loaded from it
            if self.residency is not None:
                self.residency.start()  # before vLLM starts: its first events count
        except BaseException:
            self.folder_lock.release()
            raise

    def start(self) -> None:
        """Begin start-up in the background (call from the event loop)."""
        self._startup = asyncio.create_task(self._start_up(), name="warmrag-startup")

    async def wait_ready(self) -> None:
        if self._startup is not None:
            await asyncio.shield(self._startup)

    async def _start_up(self) -> None:
        try:
            await self._bring_up_llm()
            if self._should_seed_sample_kb():
                self.phase = Phase.SEEDING_SAMPLE_KB
                change = await self.knowledge.ingest(load_sample_documents())
                log.info("seeded the sample knowledge base: %d documents", len(change.added))
            self.phase = Phase.WARMING_UP
            # Prefix caching and cached-token counts on, or /ready says which flag is
            # missing; the probe also loads the tokenizer and runs a forward pass.
            for result in await probe_all(self.llm):
                log.info(
                    "vLLM %s caches prefixes (%d of %d tokens)",
                    result.server,
                    result.cached_tokens,
                    result.prompt_tokens,
                )
            if self.replica_watch is not None:
                self.replica_watch.restore_placements()
            if self.warmup is not None:
                await self.warmup.start()  # budget, then the hottest persisted entries
                await self.warmup.flush()  # e.g. the sample KB just seeded
                s = self.settings
                self.scheduler = WarmupScheduler(
                    self.warmup,
                    detect_interval_s=s.warmup.detect_interval_s,
                    sweep_interval_s=s.warmup.sweep_interval_s,
                    hot_interval_s=s.warmup.hot_interval_s,
                )
                self.scheduler.start()
            if self.supervisor is not None:
                self._supervision = asyncio.create_task(
                    self.supervisor.run(), name="warmrag-vllm-supervisor"
                )
            if self.replica_watch is not None:
                self._watching = asyncio.create_task(
                    self.replica_watch.run(), name="warmrag-replica-watch"
                )
            self.phase = Phase.READY
            log.info("warmrag is ready")
        except Exception as exc:  # reported by /ready; the process keeps serving /health
            log.exception("start-up failed")
            # Errors written for operators say what to do; others name only their type.
            why = str(exc) if isinstance(exc, _SAY_WHY) else type(exc).__name__
            self.error = f"start-up failed in {self.phase.value}: {why}"
            self.phase = Phase.FAILED

    def _should_seed_sample_kb(self) -> bool:
        """The sample documents go only into the embedded default's own store, and only
        on its very first start: a KB the user emptied stays empty, and a collection on
        a server (shared, maybe someone else's) never gets them."""
        s = self.settings
        return (
            s.seed_sample_kb
            and not s.qdrant_is_remote
            and self.kb.version == 0
            and not self.kb.document_count()
        )

    async def _bring_up_llm(self) -> None:
        server = self.vllm_server
        if server is not None:
            require_vllm_cpu()
            if self.cpu_plan is not None:
                log.info("vLLM-CPU settings: %s", self.cpu_plan.reason)
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

    def _on_vllm_down(self) -> None:
        self.phase = Phase.VLLM_RESTARTING

    async def _on_vllm_restarted(self) -> None:
        """A fresh vLLM has an empty prefix cache: count it, and warm the registry again."""
        try:
            if self.warmup is not None:
                await self.warmup.start()  # counts the cold start; hottest entries first
            else:
                self.metrics.warmup.cold_starts.inc()
        except Exception:
            log.exception("re-warming after the vLLM restart failed; chats go on cold")
        self.phase = Phase.READY

    async def stop(self) -> None:
        """Stop what ``start`` started and close what ``open`` opened, logging how long it
        took and its parts: at 1,000,000 chunks on a 2-core EPYC a clean stop after a
        change took 12.4 s, 12.3 s of it the graph's snapshot saved for the next start,
        until that save ran without the cyclic collector (1.7 s, 1.6 s of it the save)."""
        started = time.perf_counter()
        parts: dict[str, float] = {}

        @contextlib.contextmanager
        def timed(part: str) -> Iterator[None]:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                parts[part] = time.perf_counter() - t0

        for task in (self._startup, self._supervision, self._watching):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self.scheduler is not None:
            self.scheduler.shutdown()
        if self.warmup is not None:
            with timed("warmup"):
                await self.warmup.aclose()
                self.warmup.close()
        if self.residency is not None:
            await anyio.to_thread.run_sync(self.residency.stop)
        await self.llm.aclose()
        if self.vllm_server is not None:
            with timed("vLLM"):
                await anyio.to_thread.run_sync(self.vllm_server.stop)
        with timed("the knowledge base and its graph"):
            self.knowledge.close()
        self.folder_lock.release()  # last: the graph's snapshot is saved by now
        self.phase = Phase.STOPPED
        log.info(
            "warmrag stopped in %.1f s (%s)",
            time.perf_counter() - started,
            ", ".join(f"{part} {took:.1f} s" for part, took in parts.items()),
        )
