"""Liveness, readiness and Prometheus metrics (open routes: they show no URLs, paths or
log text)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from api.deps import MetricsDep, RuntimeDep
from api.schemas import (
    HealthResponse,
    ReadyExtra,
    ReadyResponse,
    ReplicaOut,
    SharedQdrantOut,
    VLLMPlanOut,
    error_responses,
)

router = APIRouter(tags=["health"], responses=error_responses())


@router.get("/health", response_model=HealthResponse)
async def health() -> HealthResponse:
    """The process is up (says nothing about vLLM)."""
    return HealthResponse()


@router.get(
    "/ready",
    response_model=ReadyResponse,
    responses={503: {"model": ReadyResponse, "description": "Not ready yet: the phase says why."}},
)
async def ready(runtime: RuntimeDep) -> JSONResponse:
    """200 once start-up (vLLM, sample KB, warmup) is done and vLLM still answers."""
    ready = False
    detail = runtime.error
    if runtime.ready:
        ready = await runtime.llm.is_healthy()
        detail = None if ready else "vLLM is not answering"
    kb = runtime.kb
    extra = ReadyExtra(kb_version=kb.version, documents=kb.document_count())
    if runtime.pool is not None:
        extra.replicas = [
            ReplicaOut(name=r.name, up=r.up, kv_usage=r.kv_usage, weight=r.weight)
            for r in runtime.pool.snapshot().replicas
        ]
    if runtime.settings.qdrant_is_remote:
        extra.qdrant = SharedQdrantOut(writer=kb.writable)
    if runtime.cpu_plan is not None:
        plan = runtime.cpu_plan
        extra.vllm = VLLMPlanOut(
            dtype=plan.dtype, enforce_eager=plan.enforce_eager, reason=plan.reason
        )
    body = ReadyResponse(ready=ready, phase=runtime.phase.value, detail=detail, extra=extra)
    # Parts that do not apply are left out of ``extra``, not sent as null.
    content = {**body.model_dump(), "extra": extra.model_dump(exclude_none=True)}
    return JSONResponse(content, status_code=200 if ready else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
            "description": "Prometheus text format.",
        }
    },
)
async def metrics(service_metrics: MetricsDep) -> Response:
    """Prometheus metrics (see the README for the names)."""
    return Response(service_metrics.render(), media_type=CONTENT_TYPE_LATEST)
