"""Recent chats, for the console's hit rate over time and first-token-latency heat map.

Prometheus keeps these as counters and a histogram, which a Grafana board turns into
series; a deployment without Prometheus still wants to see them. The timeline keeps the
last ``capacity`` chats (time, first-token latency, warm) in a ring and folds them into
time slices on request. Latencies go into the cold-start design's heat-map buckets:
``HEATMAP_BUCKETS`` buckets of ``HEATMAP_BUCKET_MS``, the last one open-ended (950 ms and
over); the Prometheus histogram's lower buckets are the same edges.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

from pydantic import BaseModel, Field

#: Width of one heat-map bucket of first-token latency.
HEATMAP_BUCKET_MS = 50
#: Buckets in the heat map; the last holds every latency from (n - 1) * width up.
HEATMAP_BUCKETS = 20
#: Chats kept. At 10 chats a second that is the last quarter of an hour; each is three
#: numbers, so the ring stays well under a megabyte.
TIMELINE_CAPACITY = 10_000


def heatmap_bucket(ttft_ms: float) -> int:
    """The heat-map bucket of a first-token latency."""
    return min(HEATMAP_BUCKETS - 1, max(0, int(ttft_ms // HEATMAP_BUCKET_MS)))


class TimeSlice(BaseModel):
    """Chats that ended within one slice of time (a chat is recorded when it ends, when
    vLLM's usage says whether it was warm)."""

    start: float = Field(description="Slice start, seconds since the epoch.")
    chats: int
    warm: int = Field(description="Chats served from a warm prefix (cache.warm_hit).")
    hit_rate: float | None = Field(description="warm / chats; null for a slice without chats.")
    warm_buckets: list[int] = Field(description="Warm chats per first-token-latency bucket.")
    cold_buckets: list[int] = Field(description="Other chats per first-token-latency bucket.")


class TrafficSummary(BaseModel):
    """The timeline folded into slices, oldest first, and its totals."""

    now: float
    slice_s: float
    bucket_ms: int = HEATMAP_BUCKET_MS
    bucket_edges_ms: list[int] = Field(
        description="Lower edge of each bucket; the last bucket has no upper edge."
    )
    slices: list[TimeSlice]
    chats: int
    warm: int
    hit_rate: float | None
    kept: int = Field(description="Chats the timeline holds (it keeps the most recent).")
    capacity: int


class ChatTimeline:
    """A bounded ring of (time, first-token latency, warm) for the most recent chats."""

    def __init__(
        self, capacity: int = TIMELINE_CAPACITY, clock: Callable[[], float] = time.time
    ) -> None:
        self._chats: deque[tuple[float, float, bool]] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._clock = clock
        self.capacity = capacity

    def record(self, ttft_ms: float, warm: bool) -> None:
        with self._lock:
            self._chats.append((self._clock(), ttft_ms, warm))

    def summary(self, window_s: float, slice_s: float) -> TrafficSummary:
        """The last ``window_s`` seconds in slices of ``slice_s``, aligned to whole
        multiples of ``slice_s`` so that two calls agree on their slices."""
        now = self._clock()
        count = max(1, math.ceil(window_s / slice_s))
        first = (math.floor(now / slice_s) - count + 1) * slice_s
        slices = [
            TimeSlice(
                start=first + i * slice_s,
                chats=0,
                warm=0,
                hit_rate=None,
                warm_buckets=[0] * HEATMAP_BUCKETS,
                cold_buckets=[0] * HEATMAP_BUCKETS,
            )
            for i in range(count)
        ]
        with self._lock:
            chats = list(self._chats)
            kept = len(self._chats)
        for at, ttft_ms, warm in chats:
            index = math.floor((at - first) / slice_s)
            if not 0 <= index < count:
                continue
            cell = slices[index]
            cell.chats += 1
            cell.warm += int(warm)
            buckets = cell.warm_buckets if warm else cell.cold_buckets
            buckets[heatmap_bucket(ttft_ms)] += 1
        for cell in slices:
            cell.hit_rate = cell.warm / cell.chats if cell.chats else None
        total = sum(c.chats for c in slices)
        warm_total = sum(c.warm for c in slices)
        return TrafficSummary(
            now=now,
            slice_s=slice_s,
            bucket_edges_ms=[i * HEATMAP_BUCKET_MS for i in range(HEATMAP_BUCKETS)],
            slices=slices,
            chats=total,
            warm=warm_total,
            hit_rate=warm_total / total if total else None,
            kept=kept,
            capacity=self.capacity,
        )
