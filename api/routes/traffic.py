"""Admin: recent chats as hit rate over time and a first-token-latency heat map."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from api.deps import AdminDep, MetricsDep
from api.schemas import ADMIN_ERRORS, error_responses
from rag.chat.timeline import TrafficSummary

router = APIRouter(
    prefix="/admin/traffic",
    tags=["admin"],
    dependencies=[AdminDep],
    responses=error_responses(*ADMIN_ERRORS),
)

#: Most slices one summary may have (a day in minutes).
MAX_SLICES = 1440


@router.get("", response_model=TrafficSummary)
async def traffic(
    metrics: MetricsDep,
    window_s: Annotated[
        float, Query(ge=1, le=86_400, description="How far back, in seconds.")
    ] = 3600,
    slice_s: Annotated[float, Query(ge=1, le=3600, description="Width of one slice.")] = 60,
) -> TrafficSummary:
    """Chats of the last ``window_s`` seconds (of the most recent few thousand this
    instance served) per slice: how many, how many warm, and their first-token latencies
    in 50 ms buckets, warm and cold apart."""
    if window_s / slice_s > MAX_SLICES:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"window_s / slice_s is {window_s / slice_s:.0f} slices; at most {MAX_SLICES}",
        )
    return metrics.chat.timeline.summary(window_s, slice_s)
