"""The recent-chats timeline: heat-map buckets, aligned slices, warm and cold apart."""

from __future__ import annotations

from rag.chat.metrics import FIRST_TOKEN_BUCKETS
from rag.chat.timeline import HEATMAP_BUCKET_MS, HEATMAP_BUCKETS, ChatTimeline, heatmap_bucket


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_buckets_are_50_ms_wide_and_the_last_is_open_ended() -> None:
    assert (HEATMAP_BUCKET_MS, HEATMAP_BUCKETS) == (50, 20)
    assert [heatmap_bucket(ms) for ms in (0, 49.9, 50, 99.9, 100, 949.9)] == [0, 0, 1, 1, 2, 18]
    assert heatmap_bucket(950) == heatmap_bucket(30_000) == 19
    # The Prometheus histogram's lower buckets are the same edges (its `le`: upper edges).
    assert FIRST_TOKEN_BUCKETS[:HEATMAP_BUCKETS] == tuple(
        round((i + 1) * HEATMAP_BUCKET_MS / 1000, 2) for i in range(HEATMAP_BUCKETS)
    )


def test_chats_fold_into_aligned_slices_with_warm_and_cold_apart() -> None:
    clock = Clock(999_960.0)  # a multiple of 60: slice edges fall on whole minutes
    timeline = ChatTimeline(clock=clock)
    timeline.record(120.0, warm=False)  # 2 minutes ago, outside a 2-minute window
    clock.now += 60
    timeline.record(260.0, warm=True)
    timeline.record(980.0, warm=False)
    clock.now += 61
    timeline.record(40.0, warm=True)
    clock.now += 1

    summary = timeline.summary(window_s=120, slice_s=60)

    assert [s.start for s in summary.slices] == [1_000_020.0, 1_000_080.0]
    first, second = summary.slices
    assert (first.chats, first.warm, first.hit_rate) == (2, 1, 0.5)
    assert first.warm_buckets[5] == 1 and sum(first.warm_buckets) == 1
    assert first.cold_buckets[19] == 1 and sum(first.cold_buckets) == 1
    assert (second.chats, second.warm, second.warm_buckets[0]) == (1, 1, 1)
    assert (summary.chats, summary.warm, summary.kept) == (3, 2, 4)
    assert summary.bucket_edges_ms == [50 * i for i in range(20)]


def test_an_empty_slice_has_no_hit_rate_and_the_ring_keeps_the_newest() -> None:
    clock = Clock(600.0)
    timeline = ChatTimeline(capacity=3, clock=clock)
    assert timeline.summary(60, 60).hit_rate is None
    for ms in (10, 20, 30, 40):
        timeline.record(ms, warm=False)
    summary = timeline.summary(60, 60)
    assert (summary.kept, summary.chats, summary.capacity) == (3, 3, 3)
    assert summary.slices[-1].cold_buckets[0] == 3
    assert summary.slices[-1].hit_rate == 0.0
