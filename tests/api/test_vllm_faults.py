"""vLLM failing under a running service: the service stays up, says what is wrong,
and recovers by itself.

Fault injected in every test: warmrag's vLLM child is ``tests/fake_vllm_server.py``
instead of vLLM (``VLLMServer.command`` is replaced), so that the child can be
SIGKILLed, held down, or made to send malformed, truncated or endless streams on
request. Everything else (supervisor, HTTP client, app, stores, embedder) is real.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.server import free_port
from rag.llm.server import VLLMServer
from tests.conftest import REPO, Service, Services

FAKE_SERVER = REPO / "tests" / "fake_vllm_server.py"
HOLD_ENV = "FAKE_VLLM_HOLD_FILE"


class FakeChild:
    """Controls the fake vLLM child of one service."""

    def __init__(self, service: Service, hold_file: Path) -> None:
        self.service = service
        self.hold_file = hold_file
        assert service.runtime.vllm_server is not None
        self.server: VLLMServer = service.runtime.vllm_server
        self.http = httpx.Client(base_url=self.server.url, timeout=10)

    def fault(self, mode: str) -> None:
        self.http.post("/fault", json={"mode": mode}).raise_for_status()

    def stats(self) -> dict[str, Any]:
        return dict(self.http.get("/stats").json())

    def kill(self) -> None:
        assert self.server.pid is not None
        os.kill(self.server.pid, signal.SIGKILL)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def fake_child(
    monkeypatch: pytest.MonkeyPatch, services: Services, model_dir: Path, tmp_path: Path
) -> Callable[..., FakeChild]:
    def command(self: VLLMServer) -> list[str]:
        return [sys.executable, str(FAKE_SERVER), "--port", str(self.port)]

    monkeypatch.setattr(VLLMServer, "command", command)
    hold_file = tmp_path / "hold"
    monkeypatch.setenv(HOLD_ENV, str(hold_file))

    def start(**overrides: Any) -> FakeChild:
        service = services.start(
            model_dir=model_dir, vllm_port=free_port(), vllm_startup_timeout_s=60, **overrides
        )
        return FakeChild(service, hold_file)

    return start


def phase(service: Service) -> str:
    return str(service.client.get("/ready").json()["phase"])


def test_dead_child_is_restarted_and_rewarmed(fake_child: Callable[..., FakeChild]) -> None:
    child = fake_child()
    service = child.service
    service.ingest({"id": "zorn", "text": "The river Zorn flows through Kellerby."})
    seeded = service.client.post(
        "/admin/warmup/queries", json={"queries": ["Where does the Zorn flow?"]},
        headers=service.admin(),
    )  # fmt: skip
    assert seeded.status_code == 200 and seeded.json()["warm_requests"] == 1

    child.hold_file.touch()  # the restarted child waits until the test lets it serve
    child.kill()
    wait_for(lambda: phase(service) == "vllm_restarting", 10, "phase vllm_restarting")
    assert service.client.get("/ready").status_code == 503
    chat = service.client.post("/v1/chat", json={"question": "Where does the Zorn flow?"})
    assert chat.status_code == 503
    assert chat.headers["retry-after"].isdigit()
    assert chat.json()["component"] == "vllm"
    # Ingest does not need vLLM: it keeps working.
    service.ingest({"id": "aster", "text": "Aster Bridge crosses the Zorn."})

    child.hold_file.unlink()
    wait_for(lambda: service.client.get("/ready").status_code == 200, 60, "ready again")
    metrics = service.client.get("/metrics").text
    assert "warmrag_cold_start_total 2.0" in metrics
    assert 'warmrag_rewarm_total{reason="startup"} 1.0' in metrics
    assert child.stats()["prefills"] >= 1  # the registry entry, re-warmed in the new child
    assert service.chat("Where does the Zorn flow?")["answer"] == "Hello there"


def test_crash_mid_stream_ends_with_an_error_event(fake_child: Callable[..., FakeChild]) -> None:
    child = fake_child()
    service = child.service
    child.fault("die_mid_stream")
    with service.client.stream(
        "POST", "/v1/chat", json={"question": "Anything?", "stream": True}
    ) as resp:
        assert resp.status_code == 200
        body = resp.read().decode()
    assert "event: token" in body
    assert "event: error" in body and '"component": "vllm"' in body
    assert "event: done" not in body  # never a truncated answer marked complete
    wait_for(lambda: service.client.get("/ready").status_code == 200, 60, "restart")
    assert service.runtime.supervisor is not None and service.runtime.supervisor.restarts == 1


@pytest.mark.parametrize("mode", ["malformed", "error_chunk", "malformed_first"])
def test_malformed_output_is_a_clean_502(fake_child: Callable[..., FakeChild], mode: str) -> None:
    child = fake_child()
    service = child.service
    child.fault(mode)
    resp = service.client.post("/v1/chat", json={"question": "Anything?"})
    assert resp.status_code == 502
    assert resp.json()["detail"] == "vLLM sent a malformed response"
    assert resp.json()["component"] == "vllm"
    with service.client.stream(
        "POST", "/v1/chat", json={"question": "Anything?", "stream": True}
    ) as stream:
        if stream.status_code == 200:  # the first token was fine: the error comes as an event
            body = stream.read().decode()
            assert "event: error" in body and "event: done" not in body
        else:
            assert stream.status_code == 502
    completions = service.client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Anything?"}]}
    )
    assert completions.status_code == 502
    text = service.client.get("/metrics").text
    assert 'outcome="llm_bad_response"' in text


def test_hung_vllm_hits_the_chat_deadline_and_ready_still_answers(
    fake_child: Callable[..., FakeChild],
) -> None:
    child = fake_child(chat_deadline_s=2)
    service = child.service
    child.fault("hang")
    results: dict[str, httpx.Response] = {}

    def ask() -> None:
        results["chat"] = service.client.post("/v1/chat", json={"question": "Anything?"})

    asker = threading.Thread(target=ask)
    started = time.monotonic()
    asker.start()
    wait_for(lambda: child.stats()["chats"] >= 1, 10, "the chat to reach vLLM")
    ready = service.client.get("/ready", timeout=5)  # its own connection pool
    assert ready.status_code == 200
    asker.join(30)
    assert results["chat"].status_code == 504
    assert results["chat"].json()["component"] == "vllm"
    assert time.monotonic() - started < 15
