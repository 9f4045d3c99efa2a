"""The residency side of the composition root: where each vLLM server publishes its
KV-cache events, one subscriber and one residency index per server.

The embedded child publishes on IPC sockets in its own folder (nothing listens on
the network); external servers are named by ``WARMRAG_VLLM_KV_EVENTS_ENDPOINTS``.
Nothing here connects: the subscribers start with the runtime.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from api.config import Settings
from api.replicas import replica_name
from rag.llm.block_hashes import VLLMBlockHasher, vllm_hashing_available
from rag.llm.client import LLMEngine, VLLMClient
from rag.llm.kv_events import KVEventsEndpoint, KVEventSubscriber
from rag.llm.pool import ReplicaPool
from warmup.residency import ResidencyIndex
from warmup.tracker import SINGLE, ResidencyTracker

log = logging.getLogger(__name__)

#: Longest path a Unix socket takes (108 bytes with the terminator on Linux).
_IPC_PATH_MAX = 100


def child_endpoint(work_dir: Path) -> KVEventsEndpoint | None:
    """IPC sockets in the vLLM child's folder (None where its path is too long for one)."""
    publish, replay = work_dir.resolve() / "kv-events.sock", work_dir.resolve() / "kv-replay.sock"
    if len(str(replay)) > _IPC_PATH_MAX:
        log.warning("KV events off: the data folder's path is too long for a socket (%s)", replay)
        return None
    return KVEventsEndpoint(f"ipc://{publish}", f"ipc://{replay}")


def external_endpoints(settings: Settings) -> list[KVEventsEndpoint]:
    """``WARMRAG_VLLM_KV_EVENTS_ENDPOINTS``: ``PUBLISH|REPLAY``, or a TCP endpoint whose
    replay endpoint is the next port (an IPC one alone has no replay)."""
    out = []
    for item in settings.kv_events_endpoint_list:
        publish, _, replay = item.partition("|")
        if not replay and publish.startswith("tcp://"):
            host, _, port = publish.rpartition(":")
            replay = f"{host}:{int(port) + 1}"
        out.append(KVEventsEndpoint(publish, replay or None))
    return out


@dataclass
class Residency:
    tracker: ResidencyTracker
    subscribers: list[KVEventSubscriber] = field(default_factory=list)

    def start(self) -> None:
        """Load vLLM's event classes and hash chain (blocking: run it in a thread) and
        follow every server's events."""
        self.tracker.warm_up()
        for subscriber in self.subscribers:
            subscriber.start()

    def stop(self) -> None:
        for subscriber in self.subscribers:
            subscriber.stop()


def build_residency(
    settings: Settings,
    llm: LLMEngine,
    child: KVEventsEndpoint | None,
) -> Residency | None:
    """One subscriber and index per server that publishes events (None: none does, or
    residency is off, or this process has no vLLM to hash and decode with)."""
    if not settings.warmup.residency:
        return None
    endpoints = [child] if child is not None else external_endpoints(settings)
    if not endpoints:
        return None
    if not vllm_hashing_available():
        log.warning("KV events off: vLLM is not installed here to decode them (the cpu extra)")
        return None
    clients = [r.engine for r in llm.replicas] if isinstance(llm, ReplicaPool) else [llm]
    tokenizer = next((c for c in clients if isinstance(c, VLLMClient)), None)
    if tokenizer is None:
        return None
    tracker = ResidencyTracker(tokenizer.prefix_token_ids, VLLMBlockHasher)
    residency = Residency(tracker)
    names = (
        [replica_name(u) for u in settings.vllm_urls] if isinstance(llm, ReplicaPool) else [SINGLE]
    )
    for name, endpoint in zip(names, endpoints, strict=True):
        index = ResidencyIndex()
        tracker.attach(name, index)
        residency.subscribers.append(KVEventSubscriber(endpoint, index))
    if isinstance(llm, ReplicaPool):
        llm.placement.consult(tracker)
    return residency
