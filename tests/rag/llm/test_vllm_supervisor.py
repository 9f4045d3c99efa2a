"""The supervisor retries a vLLM child that fails to come back, waiting longer each time.

Fault injected: a stand-in server whose first two restarts fail ``wait_ready`` (as a
child that exits at start-up would); no process is started."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rag.llm.server import VLLMServer, VLLMServerError
from rag.llm.supervisor import VLLMSupervisor


class FlakyServer(VLLMServer):
    def __init__(self, failures: int, folder: Path) -> None:
        super().__init__(folder, "m", 1, folder)
        self.failures = failures
        self.starts = 0
        self.running = False

    def start(self) -> None:
        self.starts += 1

    def stop(self, timeout_s: float = 20.0) -> None:
        self.running = False

    def wait_ready(self, timeout_s: float = 600.0, progress_every_s: float = 30.0) -> None:
        if self.starts <= self.failures:
            raise VLLMServerError("exited with code 1")
        self.running = True

    def is_running(self) -> bool:
        return self.running


def test_failed_restarts_are_retried_with_growing_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = FlakyServer(failures=2, folder=tmp_path)
    events: list[str] = []

    async def restarted() -> None:
        events.append("restarted")

    supervisor = VLLMSupervisor(
        server,
        startup_timeout_s=1,
        on_down=lambda: events.append("down"),
        on_restarted=restarted,
        backoff_initial_s=0.01,
        backoff_max_s=0.02,
    )
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay: float) -> None:
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", recording_sleep)  # the backoff, without waiting
    asyncio.run(supervisor.restart())
    assert events == ["down", "restarted"]
    assert (server.starts, supervisor.failed_attempts, supervisor.restarts) == (3, 2, 1)
    assert slept == [0.01, 0.02]  # doubled, capped at backoff_max_s
    assert server.is_running() and not supervisor.restarting
