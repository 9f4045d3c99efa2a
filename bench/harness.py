"""What every benchmark needs: a vLLM child (or another vLLM's URL), warmrag services
served over real HTTP in this process, and direct calls to vLLM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Unpack

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, TypeAdapter

from api.config import Settings
from api.main import create_app
from api.residency import child_endpoint
from api.schemas import ChatResponse
from api.server import ThreadedServer, free_port
from api.stores import build_knowledge
from bench.batches import ingest_in_batches
from bench.paths import REPO, bench_dir
from bench.strategies import Overrides
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.models import ChunkingStrategy, DocumentIn
from rag.knowledge.service import KnowledgeService
from rag.llm.bundled_model import DEFAULT_MODEL, ChatModel, bundled, ensure_chat_model
from rag.llm.client import TextDelta, VLLMClient
from rag.llm.cpu import CpuFeatures, plan_for
from rag.llm.server import VLLMServer
from warmup.reports import CycleReport
from warmup.view import BudgetView

MODEL_NAME = bundled(DEFAULT_MODEL).served_name
#: The KV-event endpoints (``PUBLISH|REPLAY``) of the vLLM children this process
#: started, by URL: services on them follow the events as the embedded default does.
_KV_EVENTS: dict[str, str] = {}
TOKEN = "bench-token"
T = TypeVar("T")
_CYCLES = TypeAdapter(list[CycleReport])


@contextmanager
def vllm(
    *,
    kv_cache_gib: int = 4,
    enforce_eager: bool = False,
    prefix_caching: bool = True,
    chat_model: ChatModel = DEFAULT_MODEL,
    log: Callable[[str], None] = print,
) -> Iterator[str]:
    """A vLLM child in dev mode (``POST /reset_prefix_cache``) serving ``chat_model``
    (by its ``served_name``); yields its URL.

    Its compile cache lives in ``data/cache/bench-vllm`` (another model's in
    ``bench-vllm-<name>``, so two children can run at once) so later starts reuse it."""
    spec = bundled(chat_model)
    model = ensure_chat_model(REPO / "data" / "models" / spec.served_name, spec.name)
    plan = plan_for(CpuFeatures.read(), enforce_eager=enforce_eager or None)
    suffix = "" if spec.name is DEFAULT_MODEL else f"-{spec.name.value}"
    work_dir = REPO / "data" / "cache" / f"bench-vllm{suffix}"
    events = child_endpoint(work_dir)
    server = VLLMServer(
        model,
        spec.served_name,
        free_port(),
        work_dir,
        kv_events=events,
        kv_cache_gib=kv_cache_gib,
        enforce_eager=plan.enforce_eager,
        dev_mode=True,
        prefix_caching=prefix_caching,
        dtype=plan.dtype,
    )
    log(f"vLLM: {plan.reason}")
    started = time.perf_counter()
    server.start()
    try:
        server.wait_ready()
        log(
            f"vLLM ready in {time.perf_counter() - started:.0f} s (KV {kv_cache_gib} GiB, "
            f"prefix caching {'on' if prefix_caching else 'off'})"
        )
        if events is not None:
            _KV_EVENTS[server.url] = f"{events.publish}|{events.replay}"
        yield server.url
    finally:
        _KV_EVENTS.pop(server.url, None)
        server.stop()


class RegistryEntry(BaseModel):
    """What the benchmarks read of a warm entry in ``GET /admin/warmup``."""

    fingerprint: str
    doc_ids: list[str]
    queries: list[str]
    replica: str | None = None


class Registry(BaseModel):
    """What the benchmarks read of ``GET /admin/warmup``."""

    entries: list[RegistryEntry]
    warm_tokens: int
    budget: BudgetView | None


@dataclass
class Service:
    server: ThreadedServer
    client: httpx.Client

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def post(self, path: str, body: object, admin: bool = False) -> Any:
        """The parsed JSON body of a POST (the typed calls below validate it)."""
        resp = self.client.post(path, json=body, headers=self.admin if admin else None)
        resp.raise_for_status()
        return resp.json()

    def get(self, path: str, params: Mapping[str, float] | None = None) -> Any:
        """The parsed JSON body of an admin GET."""
        resp = self.client.get(path, params=params, headers=self.admin)
        resp.raise_for_status()
        return resp.json()

    def chat(self, question: str) -> ChatResponse:
        return ChatResponse.model_validate(self.post("/v1/chat", {"question": question}))

    def ingest(self, documents: Sequence[Mapping[str, object]], batch: int = 500) -> None:
        for i in range(0, len(documents), batch):
            self.post("/admin/documents", {"documents": list(documents[i : i + batch])}, True)

    def registry(self) -> Registry:
        return Registry.model_validate(self.get("/admin/warmup"))

    def warm_cycle(self) -> list[CycleReport]:
        """What the scheduled jobs would do now: detection, re-warms, hot queries."""
        return _CYCLES.validate_python(self.post("/admin/warmup", None, admin=True))

    def seed(self, queries: Sequence[str]) -> CycleReport:
        """Warm these questions' contexts (``POST /admin/warmup/queries``)."""
        body = {"queries": list(queries)}
        return CycleReport.model_validate(self.post("/admin/warmup/queries", body, admin=True))

    def cycles_since(self, since: float) -> list[CycleReport]:
        """The cycles begun since ``since`` (epoch seconds) that did something."""
        return _CYCLES.validate_python(self.get("/admin/warmup/reports", {"since": since}))

    def metric(self, name: str) -> float:
        """A counter or gauge of the service's ``/metrics`` (0 when absent)."""
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0


def ask_all(
    svc: Service, questions: Iterable[str], progress: Callable[[int], None] | None = None
) -> list[ChatResponse]:
    """Each question through ``POST /v1/chat``, one after another; ``progress`` is told
    how many were answered after each."""
    replies = []
    for question in questions:
        replies.append(svc.chat(question))
        if progress is not None:
            progress(len(replies))
    return replies


@contextmanager
def service(vllm_url: str, data_dir: Path, **overrides: Unpack[Overrides]) -> Iterator[Service]:
    # Settings' keyword names: warmup_* ones are folded into its nested warmup settings.
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "vllm_url": vllm_url,
        "admin_token": TOKEN,
        "seed_sample_kb": False,
        "max_tokens": 2,  # TTFT is the measure; a longer answer only slows the run
        "served_model_name": MODEL_NAME,
        "warmup_debounce_s": 3600.0,  # the benchmark decides when detection runs
        "vllm_kv_events_endpoints": _KV_EVENTS.get(vllm_url),
        **overrides,
    }
    app = create_app(Settings(**values), embedder=shared_embedder(), freeze_heap=True)
    server = ThreadedServer(app)  # the heap frozen as ``warmrag serve`` freezes it
    server.start()
    # A warmup cycle on cold ~1.3k-token contexts runs for minutes here (64 prefills of
    # ~5 s each); the run waits for it rather than failing half-way.
    client = httpx.Client(base_url=server.url, timeout=1800)
    try:
        yield Service(server, client)
    finally:
        client.close()
        server.stop()


@dataclass(frozen=True)
class Ingested:
    """A knowledge service holding the documents, and how long their ingest took."""

    knowledge: KnowledgeService
    settings: Settings
    seconds: float

    @property
    def kb(self) -> KnowledgeBase:
        return self.knowledge.kb


@contextmanager
def ingested(
    documents: Sequence[DocumentIn],
    batch: int,
    embedder: Embedder,
    chunking: ChunkingStrategy | None = None,
) -> Iterator[Ingested]:
    """The service's own knowledge base in-process (no HTTP, no vLLM, no triple
    extraction) in a temporary folder, ``documents`` ingested ``batch`` at a time as an
    operator's calls would; ``chunking`` overrides the service's setting."""
    with bench_dir() as folder:
        settings = Settings(data_dir=folder, kg_extraction=False, seed_sample_kb=False)
        if chunking is not None:
            settings = settings.model_copy(update={"chunking": chunking})
        knowledge = build_knowledge(settings, embedder)
        knowledge.open()
        try:
            started = time.perf_counter()
            ingest_in_batches(knowledge, documents, batch)
            yield Ingested(knowledge, settings, time.perf_counter() - started)
        finally:
            knowledge.close()


def _with_client(
    vllm_url: str, call: Callable[[VLLMClient], Awaitable[T]], model: str = MODEL_NAME
) -> T:
    async def run() -> T:
        client = VLLMClient(vllm_url, model)
        try:
            return await call(client)
        finally:
            await client.aclose()

    return asyncio.run(run())


def reset_prefix_cache(vllm_url: str) -> None:
    """Empty vLLM's prefix cache, as a restarted vLLM's would be."""
    _with_client(vllm_url, lambda c: c.reset_prefix_cache())


def engine_busy_s(vllm_url: str) -> float:
    """Seconds vLLM spent on requests since it started (the sum of its end-to-end
    request latencies: chats, prefills and re-touches alike)."""

    async def read(client: VLLMClient) -> float:
        text = await client.metrics_text()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "vllm:e2e_request_latency_seconds_sum"
        )

    return _with_client(vllm_url, read)


def kv_usage(vllm_url: str) -> float:
    return _with_client(vllm_url, lambda c: c.kv_usage())


def floor_ttft(vllm_url: str, question: str, model: str = MODEL_NAME) -> float:
    """TTFT (ms) of the question alone, straight to vLLM: no retrieval, no context;
    ``model``: the name that vLLM serves."""

    async def ask(client: VLLMClient) -> float:
        started = time.perf_counter()
        async for event in client.stream_chat(
            [{"role": "user", "content": question}], max_tokens=8, temperature=0.0
        ):
            if isinstance(event, TextDelta):
                break
        return (time.perf_counter() - started) * 1000

    return _with_client(vllm_url, ask, model)
