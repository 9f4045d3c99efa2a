"""Admin: the warm registry, running a warmup cycle, seed queries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from api.deps import AdminDep, KBDep, SchedulerDep, WarmupDep
from api.guards import StrictJSONRoute
from api.schemas import (
    ADMIN_ERRORS,
    JobOut,
    Question,
    RegistryResponse,
    error_responses,
)
from warmup.reports import CycleReport

router = APIRouter(
    prefix="/admin/warmup",
    tags=["admin", "warmup"],
    dependencies=[AdminDep],
    route_class=StrictJSONRoute,
    responses=error_responses(*ADMIN_ERRORS, 409, 503),
)


class SeedQueriesRequest(BaseModel):
    model_config = ConfigDict(strict=True)

    queries: list[Question] = Field(min_length=1, max_length=1000)


@router.get("", response_model=RegistryResponse)
async def registry(service: WarmupDep, kb: KBDep, scheduler: SchedulerDep) -> RegistryResponse:
    """Warm entries with their TTLs and hit counts, the budget, and the jobs' next runs."""
    return RegistryResponse(
        **dict(service.view()),
        kb_version=kb.version,
        jobs=[JobOut.model_validate(job) for job in scheduler.jobs()] if scheduler else [],
    )


@router.get("/reports", response_model=list[CycleReport])
async def reports(
    service: WarmupDep,
    since: Annotated[
        float, Query(ge=0, description="Only cycles begun at or after (epoch seconds).")
    ] = 0.0,
) -> list[CycleReport]:
    """Recent cycles that warmed, retired, extended or detected something, oldest first
    (the service keeps the last few hundred; idle sweeps are not kept)."""
    return [r for r in service.reports if r.started_at >= since]


@router.post("", response_model=list[CycleReport])
async def run_cycle(service: WarmupDep) -> list[CycleReport]:
    """Run a cycle now: pending change detection, TTL sweep, hot-query warmup."""
    return await service.run_cycle()


@router.post("/queries", response_model=CycleReport, responses=error_responses(413))
async def seed_queries(request: SeedQueriesRequest, service: WarmupDep) -> CycleReport:
    """Remember questions users are expected to ask, and warm their contexts now."""
    return await service.add_seed_queries(request.queries)
