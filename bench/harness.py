"""What every benchmark needs: a vLLM server (a child, or ``--vllm-url``), warmrag
services served over real HTTP in this process, and small statistics helpers."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault(  # as the Makefile does: torch's cache folder in data/, not /tmp
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "cache"),
)

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from api.config import Settings
from api.main import create_app
from api.server import ThreadedServer, free_port
from rag.embedding import shared_embedder
from rag.llm import VLLMClient
from rag.model import ensure_chat_model
from rag.vllm_server import VLLMServer

REPO = Path(__file__).resolve().parent.parent
MODEL_NAME = "SmolLM2-135M-Instruct"
TOKEN = "bench-token"


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vllm-url", help="use this vLLM (needs VLLM_SERVER_DEV_MODE=1)")
    parser.add_argument("--kv-cache-gib", type=int, default=4)
    parser.add_argument(
        "--enforce-eager", action="store_true", help="faster vLLM start, slightly slower TTFT"
    )


@contextmanager
def bench_dir() -> Iterator[Path]:
    """A temporary folder inside data/, removed afterwards."""
    (REPO / "data").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "data", prefix="bench-") as folder:
        yield Path(folder)


@contextmanager
def vllm(args: argparse.Namespace, work: Path) -> Iterator[str]:
    if args.vllm_url:
        yield args.vllm_url
        return
    model = ensure_chat_model(REPO / "data" / "models" / MODEL_NAME)
    server = VLLMServer(
        model,
        MODEL_NAME,
        free_port(),
        work / "vllm",
        kv_cache_gib=args.kv_cache_gib,
        enforce_eager=args.enforce_eager,
        dev_mode=True,
    )
    server.start()
    try:
        server.wait_ready()
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

    def chat(self, question: str) -> dict[str, Any]:
        return dict(self.post("/v1/chat", {"question": question}))


@contextmanager
def service(vllm_url: str, data_dir: Path, **overrides: Any) -> Iterator[Service]:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "vllm_url": vllm_url,
        "admin_token": TOKEN,
        "seed_sample_kb": False,
        "max_tokens": 8,
        "served_model_name": MODEL_NAME,
        "warmup_debounce_s": 3600.0,  # the benchmark decides when detection runs
    }
    values.update(overrides)
    server = ThreadedServer(create_app(Settings(**values), embedder=shared_embedder()))
    server.start()
    client = httpx.Client(base_url=server.url, timeout=300)
    try:
        yield Service(server, client)
    finally:
        client.close()
        server.stop()


def reset_prefix_cache(vllm_url: str) -> None:
    async def reset() -> None:
        client = VLLMClient(vllm_url, MODEL_NAME)
        try:
            await client.reset_prefix_cache()
        finally:
            await client.aclose()

    asyncio.run(reset())


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(values: Sequence[float]) -> str:
    return (
        f"p50 {statistics.median(values):7.1f}  p90 {percentile(values, 90):7.1f}"
        f"  p99 {percentile(values, 99):7.1f}  (n={len(values)})"
    )
