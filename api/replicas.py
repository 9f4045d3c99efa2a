"""The vLLM side of the composition root: one server or a pool of replicas, the
start-up probe of each, and the loop that watches replicas come and go.

With several ``WARMRAG_VLLM_URL`` endpoints, chats and warmup share one
``ReplicaPool`` (``rag.llm.pool``), so a prefix is warmed on the replica its chats are
routed to. The watch polls every replica; when one goes down, warmup re-warms the
entries it held (the router sends each to its next replica); when it comes back,
nothing moves eagerly: new cold prefixes rank it again, and old ones return when
they are next warmed.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

from api.config import Settings
from rag.llm.client import LLMEngine, VLLMClient
from rag.llm.metrics import ReplicaMetrics
from rag.llm.pool import Replica, ReplicaPool
from rag.llm.probe import ProbeResult, probe
from warmup.service import WarmupService

log = logging.getLogger(__name__)


def replica_name(url: str) -> str:
    """``host:port`` of a replica's URL: short enough for metric labels and logs."""
    parts = urlsplit(url)
    return parts.netloc or url


def build_llm(settings: Settings, urls: list[str], metrics: ReplicaMetrics) -> LLMEngine:
    """A client for one vLLM server, or a prefix-routed pool over several (reporting
    to ``metrics``)."""
    clients = [VLLMClient(u, settings.served_model_name, settings.llm_timeout_s) for u in urls]
    if len(clients) == 1:
        return clients[0]
    replicas = [Replica(replica_name(u), c) for u, c in zip(urls, clients, strict=True)]
    return ReplicaPool(
        replicas,
        policy=settings.router_policy,
        burst_headroom=settings.router_burst_headroom,
        down_after_checks=settings.replica_down_after_checks,
        metrics=metrics,
    )


async def probe_all(llm: LLMEngine) -> list[ProbeResult]:
    """Check every reachable server's flags (``rag.llm.probe``); a pool's down
    replicas are checked when they come back."""
    if not isinstance(llm, ReplicaPool):
        return [await probe(llm, "server")]
    results = []
    for replica in llm.replicas:
        if await replica.engine.is_healthy():
            results.append(await probe(replica.engine, replica.name))
    return results


class ReplicaWatch:
    """Polls a pool's replicas and tells warmup which went down."""

    def __init__(
        self, pool: ReplicaPool, warmup: WarmupService | None, *, interval_s: float
    ) -> None:
        self.pool = pool
        self.warmup = warmup
        self.interval_s = interval_s

    def restore_placements(self) -> None:
        """After a restart of this process the replicas still hold what the registry
        says they hold: route those prefixes back to them."""
        if self.warmup is not None:
            for fingerprint, replica in self.warmup.placements():
                self.pool.pin(fingerprint, replica)

    async def check(self) -> None:
        report = await self.pool.check_health()
        for name in report.went_down:
            moved = self.warmup.replica_down(name) if self.warmup is not None else 0
            log.warning("vLLM replica %s is down: %d warm prefixes move to others", name, moved)
        for name in (*report.came_up, *report.came_back):
            log.info("vLLM replica %s is up: new prefixes rank it", name)
            try:
                await probe(self._engine(name), name)
            except Exception:
                log.exception("vLLM replica %s is up without the flags warmup needs", name)

    def _engine(self, name: str) -> LLMEngine:
        return next(r.engine for r in self.pool.replicas if r.name == name)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception:
                log.exception("checking the vLLM replicas failed; trying again")
