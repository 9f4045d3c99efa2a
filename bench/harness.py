"""What every benchmark needs: a vLLM child (or another vLLM's URL), warmrag services
served over real HTTP in this process, and direct calls to vLLM."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault(  # as the Makefile does: torch's cache folder in data/, not /tmp
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "cache"),
)

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from api.config import Settings
from api.main import create_app
from api.server import ThreadedServer, free_port
from rag.knowledge.embedding import shared_embedder
from rag.llm.bundled_model import ensure_chat_model
from rag.llm.client import TextDelta, VLLMClient
from rag.llm.cpu import CpuFeatures, plan_for
from rag.llm.server import VLLMServer

REPO = Path(__file__).resolve().parent.parent
MODEL_NAME = "SmolLM2-135M-Instruct"
TOKEN = "bench-token"
T = TypeVar("T")


@contextmanager
def bench_dir() -> Iterator[Path]:
    """A temporary folder inside data/, removed afterwards."""
    (REPO / "data").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "data", prefix="bench-") as folder:
        yield Path(folder)


@contextmanager
def vllm(
    *,
    kv_cache_gib: int = 4,
    enforce_eager: bool = False,
    prefix_caching: bool = True,
    log: Callable[[str], None] = print,
) -> Iterator[str]:
    """A vLLM child in dev mode (``POST /reset_prefix_cache``); yields its URL.

    Its compile cache lives in ``data/cache/bench-vllm`` so later starts reuse it."""
    model = ensure_chat_model(REPO / "data" / "models" / MODEL_NAME)
    plan = plan_for(CpuFeatures.read(), enforce_eager=enforce_eager or None)
    server = VLLMServer(
        model,
        MODEL_NAME,
        free_port(),
        REPO / "data" / "cache" / "bench-vllm",
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
        yield server.url
    finally:
        server.stop()


@dataclass
class Service:
    server: ThreadedServer
    client: httpx.Client

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def post(self, path: str, body: Any, admin: bool = False) -> Any:
        resp = self.client.post(path, json=body, headers=self.admin if admin else None)
        resp.raise_for_status()
        return resp.json()

    def get(self, path: str) -> Any:
        resp = self.client.get(path, headers=self.admin)
        resp.raise_for_status()
        return resp.json()

    def chat(self, question: str) -> dict[str, Any]:
        return dict(self.post("/v1/chat", {"question": question}))

    def ingest(self, documents: Sequence[dict[str, Any]], batch: int = 500) -> None:
        for i in range(0, len(documents), batch):
            self.post("/admin/documents", {"documents": list(documents[i : i + batch])}, True)

    def metric(self, name: str) -> float:
        """A counter or gauge of the service's ``/metrics`` (0 when absent)."""
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0


@contextmanager
def service(vllm_url: str, data_dir: Path, **overrides: Any) -> Iterator[Service]:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "vllm_url": vllm_url,
        "admin_token": TOKEN,
        "seed_sample_kb": False,
        "max_tokens": 2,  # TTFT is the measure; a longer answer only slows the run
        "served_model_name": MODEL_NAME,
        "warmup_debounce_s": 3600.0,  # the benchmark decides when detection runs
    }
    values.update(overrides)
    server = ThreadedServer(create_app(Settings(**values), embedder=shared_embedder()))
    server.start()
    # A warmup cycle on cold ~1.3k-token contexts runs for minutes here (64 prefills of
    # ~5 s each); the run waits for it rather than failing half-way.
    client = httpx.Client(base_url=server.url, timeout=1800)
    try:
        yield Service(server, client)
    finally:
        client.close()
        server.stop()


def _with_client(vllm_url: str, call: Callable[[VLLMClient], Awaitable[T]]) -> T:
    async def run() -> T:
        client = VLLMClient(vllm_url, MODEL_NAME)
        try:
            return await call(client)
        finally:
            await client.aclose()

    return asyncio.run(run())


def reset_prefix_cache(vllm_url: str) -> None:
    """Empty vLLM's prefix cache, as a restarted vLLM's would be."""
    _with_client(vllm_url, lambda c: c.reset_prefix_cache())


def kv_usage(vllm_url: str) -> float:
    return _with_client(vllm_url, lambda c: c.kv_usage())


def floor_ttft(vllm_url: str, question: str) -> float:
    """TTFT (ms) of the question alone, straight to vLLM: no retrieval, no context."""

    async def ask(client: VLLMClient) -> float:
        started = time.perf_counter()
        async for event in client.stream_chat(
            [{"role": "user", "content": question}], max_tokens=8, temperature=0.0
        ):
            if isinstance(event, TextDelta):
                break
        return (time.perf_counter() - started) * 1000

    return _with_client(vllm_url, ask)
