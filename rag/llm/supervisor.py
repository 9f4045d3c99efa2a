"""Keep the vLLM child alive: notice when it dies, restart it with backoff.

While vLLM is down the service stays up: ``/ready`` says ``vllm_restarting``,
chats are refused with 503 and ``Retry-After``, ingest goes on. After a restart
the prefix cache is empty, so the owner counts a cold start and re-warms.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import anyio

from rag.llm.server import VLLMServer, VLLMServerError

log = logging.getLogger(__name__)


class VLLMSupervisor:
    """Watches one ``VLLMServer``; ``run`` is a task for the life of the service."""

    def __init__(
        self,
        server: VLLMServer,
        *,
        startup_timeout_s: float,
        on_down: Callable[[], None],
        on_restarted: Callable[[], Awaitable[None]],
        poll_s: float = 1.0,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
    ) -> None:
        self.server = server
        self.startup_timeout_s = startup_timeout_s
        self.on_down = on_down
        self.on_restarted = on_restarted
        self.poll_s = poll_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.restarts = 0
        self.failed_attempts = 0
        self.restarting = False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            if not self.server.is_running():
                await self.restart()

    async def restart(self) -> None:
        """Start the child again until it answers, waiting longer after each failure."""
        self.restarting = True
        log.error("vLLM exited (code %s); restarting it", self.server.returncode)
        self.on_down()
        delay = self.backoff_initial_s
        while True:
            await anyio.to_thread.run_sync(self.server.stop)  # what the dead child left
            self.server.start()
            try:
                await anyio.to_thread.run_sync(self.server.wait_ready, self.startup_timeout_s)
                break
            except VLLMServerError as exc:
                self.failed_attempts += 1
                log.error("vLLM restart failed (retry in %.0f s): %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max_s)
        self.restarts += 1
        log.info("vLLM is back after a restart (%d so far)", self.restarts)
        try:
            await self.on_restarted()
        finally:
            self.restarting = False
