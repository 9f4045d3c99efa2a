"""Admin: the warm registry, running a warmup cycle, seed queries."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, Field, field_validator

from api.deps import AdminDep, RuntimeDep
from api.runtime import Runtime
from api.schemas import MAX_QUESTION_CHARS
from warmup.reports import CycleReport
from warmup.service import WarmupService

router = APIRouter(prefix="/admin/warmup", tags=["admin", "warmup"], dependencies=[AdminDep])


class SeedQueriesRequest(BaseModel):
    queries: list[str] = Field(min_length=1, max_length=1000)

    @field_validator("queries")
    @classmethod
    def _non_blank(cls, queries: list[str]) -> list[str]:
        for i, q in enumerate(queries):
            if not q.strip():
                raise ValueError(f"query {i} is empty")
            if len(q) > MAX_QUESTION_CHARS:
                raise ValueError(f"query {i} is over {MAX_QUESTION_CHARS} characters")
        return queries


def _service(runtime: Runtime) -> WarmupService:
    if runtime.warmup is None:
        raise HTTPException(status.HTTP_409_CONFLICT, "warmup is disabled (WARMRAG_WARMUP_ENABLED)")
    if runtime.warmup.budget is None:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, f"warmup is not started yet ({runtime.phase})"
        )
    return runtime.warmup


@router.get("")
async def registry(runtime: RuntimeDep) -> dict[str, Any]:
    """Warm entries with their TTLs and hit counts, the budget, and the jobs' next runs."""
    service = _service(runtime)
    now = time.time()
    entries = []
    for entry in service.registry.entries():
        item = entry.model_dump(exclude={"messages"})
        item["ttl_s"] = round(entry.expires_at - now, 1)
        entries.append(item)
    return {
        "entries": entries,
        "warm_tokens": service.registry.warm_tokens(),
        "budget": {**asdict(service.budget), "max_tokens": service.budget.max_tokens}
        if service.budget
        else None,
        "pending_changes": service.pending_changes,
        "kb_version": runtime.kb.version,
        "warm_requests_sent": service.warmer.requests_sent,
        "jobs": runtime.scheduler.jobs() if runtime.scheduler else [],
        "last_report": service.last_report.model_dump() if service.last_report else None,
    }


@router.get("/reports", response_model=list[CycleReport])
async def reports(
    runtime: RuntimeDep,
    since: Annotated[
        float, Query(ge=0, description="Only cycles begun at or after (epoch seconds).")
    ] = 0.0,
) -> list[CycleReport]:
    """Recent cycles that warmed, retired, extended or detected something, oldest first
    (the service keeps the last few hundred; idle sweeps are not kept)."""
    return [r for r in _service(runtime).reports if r.started_at >= since]


@router.post("", response_model=list[CycleReport])
async def run_cycle(runtime: RuntimeDep) -> list[CycleReport]:
    """Run a cycle now: pending change detection, TTL sweep, hot-query warmup."""
    return await _service(runtime).run_cycle()


@router.post("/queries", response_model=CycleReport)
async def seed_queries(request: SeedQueriesRequest, runtime: RuntimeDep) -> CycleReport:
    """Remember questions users are expected to ask, and warm their contexts now."""
    return await _service(runtime).add_seed_queries(request.queries)
