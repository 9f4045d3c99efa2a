"""KV-event subscription: the sequence rules against batches handed in directly, then
the ZMQ path against the pinned vLLM's own publisher (``ZmqEventPublisher``, run in
this process on IPC sockets: the code a vLLM server publishes with), replay
included. The real server's events are checked in
tests/warmup/test_residency_vllm.py."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rag.llm.block_hashes import external_hash
from rag.llm.kv_events import TOPIC, KVEventsEndpoint, KVEventSubscriber


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def stored(self, hashes: Sequence[int]) -> None:
        self.calls.append(("stored", list(hashes)))

    def removed(self, hashes: Sequence[int]) -> None:
        self.calls.append(("removed", list(hashes)))

    def cleared(self) -> None:
        self.calls.append(("cleared", []))

    def unknown(self, reason: str) -> None:
        self.calls.append(("unknown", []))


def apply(batch: Any, sink: Any) -> int:
    sink.stored(batch)
    return 1


def subscriber(sink: Sink, history: dict[int, list[int]] | None = None) -> KVEventSubscriber:
    """Batches are lists of hashes; ``history``: what the replay socket still has."""
    sub = KVEventSubscriber(
        KVEventsEndpoint("inproc://none", "inproc://replay" if history is not None else None),
        sink,
        decode=lambda payload: payload,
        apply=apply,
    )
    if history is not None:
        kept: dict[int, Any] = history

        def replay(start: int) -> list[tuple[int, Any]]:
            return sorted((s, p) for s, p in kept.items() if s >= start)

        sub.replay = replay  # type: ignore[method-assign]
    return sub


def test_batches_in_order_are_applied_in_order() -> None:
    sink = Sink()
    sub = subscriber(sink)
    for seq in range(3):
        sub.receive(seq, [seq])  # type: ignore[arg-type]
    assert sink.calls == [("stored", [0]), ("stored", [1]), ("stored", [2])]
    assert sub.stats.gaps == 0 and sub.stats.last_seq == 2


def test_a_gap_is_filled_from_the_replay_socket() -> None:
    sink = Sink()
    sub = subscriber(sink, history={1: [1], 2: [2]})
    sub.receive(0, [0])  # type: ignore[arg-type]
    sub.receive(3, [3])  # type: ignore[arg-type]
    assert sink.calls == [("stored", [0]), ("stored", [1]), ("stored", [2]), ("stored", [3])]
    assert sub.stats.gaps == 1 and sub.stats.replayed == 2 and sub.stats.unknown == 0


def test_a_gap_vllm_no_longer_buffers_makes_the_state_unknown() -> None:
    sink = Sink()
    sub = subscriber(sink, history={2: [2]})  # batch 1 fell out of vLLM's buffer
    sub.receive(0, [0])  # type: ignore[arg-type]
    sub.receive(3, [3])  # type: ignore[arg-type]
    assert sink.calls == [("stored", [0]), ("unknown", []), ("stored", [3])]
    no_replay = Sink()
    sub = subscriber(no_replay)
    sub.receive(0, [0])  # type: ignore[arg-type]
    sub.receive(2, [2])  # type: ignore[arg-type]
    assert no_replay.calls == [("stored", [0]), ("unknown", []), ("stored", [2])]


def test_a_sequence_that_starts_again_is_a_new_vllm_with_an_empty_cache() -> None:
    sink = Sink()
    sub = subscriber(sink)
    sub.receive(0, [0])  # type: ignore[arg-type]
    sub.receive(1, [1])  # type: ignore[arg-type]
    sub.receive(0, [5])  # type: ignore[arg-type]
    assert sink.calls[-2:] == [("cleared", []), ("stored", [5])]
    assert sub.stats.restarts == 1


def test_joining_late_asks_for_the_history_first() -> None:
    sink = Sink()
    sub = subscriber(sink, history={0: [0], 1: [1]})
    sub.receive(2, [2])  # type: ignore[arg-type]
    assert [c[1] for c in sink.calls] == [[0], [1], [2]]


def test_hashes_sent_as_bytes_compare_equal_to_vllms_int_form() -> None:
    digest = bytes(range(32))
    assert external_hash(digest) == int.from_bytes(digest[-8:], "big")
    assert external_hash(12345) == 12345


# ----- over ZMQ, with vLLM's own publisher ----------------------------------------------


@pytest.fixture
def publisher(tmp_path: Path) -> Iterator[tuple[Any, KVEventsEndpoint]]:
    from vllm.distributed.kv_events import ZmqEventPublisher

    endpoint = KVEventsEndpoint(f"ipc://{tmp_path}/pub.sock", f"ipc://{tmp_path}/replay.sock")
    pub = ZmqEventPublisher(
        0, endpoint=endpoint.publish, replay_endpoint=endpoint.replay, topic=TOPIC
    )
    try:
        yield pub, endpoint
    finally:
        pub.shutdown()


def batch(*events: Any) -> Any:
    from vllm.distributed.kv_events import KVEventBatch

    return KVEventBatch(ts=time.time(), events=list(events))


def stored(*hashes: int) -> Any:
    from vllm.distributed.kv_events import BlockStored

    return BlockStored(
        block_hashes=list(hashes), parent_block_hash=None, token_ids=[], block_size=16,
        lora_id=None, medium="GPU", lora_name=None,
    )  # fmt: skip


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_vllms_publisher_reaches_the_subscriber_and_replays_what_came_before(
    publisher: tuple[Any, KVEventsEndpoint],
) -> None:
    from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved

    pub, endpoint = publisher
    # Published before anyone listened: the subscriber must fetch them by replay.
    pub.publish(batch(stored(1, 2)))
    pub.publish(batch(BlockRemoved(block_hashes=[2], medium="GPU")))
    time.sleep(0.3)  # the publisher thread has sent both into the void
    sink = Sink()
    sub = KVEventSubscriber(endpoint, sink)
    sub.start()
    try:
        assert sub.connected.wait(5)
        time.sleep(0.3)  # let the subscription reach the publisher
        pub.publish(batch(stored(3), AllBlocksCleared()))
        wait_for(lambda: len(sink.calls) == 4)
        assert sink.calls == [
            ("stored", [1, 2]),
            ("removed", [2]),
            ("stored", [3]),
            ("cleared", []),
        ]
        assert sub.stats.replayed == 2 and sub.stats.unknown == 0
    finally:
        sub.stop()
