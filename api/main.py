"""The FastAPI application: routes, request guards, request ids and error bodies.

Every response carries an ``X-Request-ID`` header (the client's, when it sent a valid one),
and every log line of a request its id. Error bodies name the problem; 5xx bodies name the
failing component and the request id, never URLs, paths or exception text (those go to the
log only).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from asgi_correlation_id import CorrelationIdMiddleware, correlation_id
from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_fastapi_instrumentator import Instrumentator

from api.config import Settings
from api.deps import ApiKeyDep
from api.folder_lock import DataFolderInUseError
from api.guards import BodySizeLimit, ChatLimiter
from api.metrics import ServiceMetrics
from api.openai_errors import OpenAIErrors, is_openai_path, openai_error
from api.routes import (
    bad_cases,
    chat,
    completions,
    console,
    documents,
    health,
    kg,
    models,
    traffic,
    warmup,
)
from api.runtime import Runtime
from rag.knowledge.edge import VectorIndexError
from rag.knowledge.embedding import Embedder
from rag.knowledge.lease import CollectionLeasedError
from rag.llm.client import LLMEngine, LLMError

log = logging.getLogger(__name__)

#: Seconds a client should wait before retrying a chat that vLLM could not take.
RETRY_AFTER_S = 5
REQUEST_ID_HEADER = "X-Request-ID"


def _safe(text: str) -> str:
    """``text`` as valid Unicode, whatever the input it quotes held."""
    return text.encode("utf-8", "replace").decode("utf-8")


def error_body(detail: str, component: str) -> dict[str, Any]:
    """The body of a 5xx: what failed, in words, the component, and the request id."""
    return {"detail": detail, "component": component, "request_id": correlation_id.get()}


def _issues(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Validation errors without the input they quote (it can be megabytes, or secret)."""
    return [
        {
            "type": str(e.get("type", "value_error")),
            "loc": [p if isinstance(p, int) else _safe(str(p)) for p in e.get("loc", ())],
            "msg": _safe(str(e.get("msg", "invalid"))),
        }
        for e in errors
    ]


def create_app(
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    llm: LLMEngine | None = None,
    metrics: ServiceMetrics | None = None,
    freeze_heap: bool = False,
) -> FastAPI:
    """``llm`` replaces the vLLM client (tests pass a fake engine, or a pool of them
    built with ``metrics``, the registry the app then serves); nothing else differs.
    ``freeze_heap``: the process that serves keeps its start-up heap out of the cyclic
    collector's walk (``Runtime``, ``api.collector``)."""
    settings = settings or Settings()
    metrics = metrics or ServiceMetrics()  # shared by the runtime and the HTTP instrumentation

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime(
            settings, embedder=embedder, llm=llm, metrics=metrics, freeze_heap=freeze_heap
        )
        app.state.runtime = runtime
        try:
            await runtime.open()
        except DataFolderInUseError as exc:
            log.error("%s", exc)  # one line for the operator; uvicorn's traceback follows
            raise
        runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(
        title="warmrag",
        summary="RAG chat that keeps the right prompt prefixes warm in vLLM's KV cache.",
        version="0.1.0",
        lifespan=lifespan,
    )
    for module in (health, documents, kg, warmup, bad_cases, traffic, console):
        app.include_router(module.router)
    app.include_router(documents.files_router)
    app.mount("/console", console.assets(), name="console")
    for module in (chat, completions, models):
        app.include_router(module.router, dependencies=[ApiKeyDep] if settings.api_keys else [])
    app.state.metrics = metrics
    app.state.chat_limiter = ChatLimiter(settings.chat_rate_limit, settings.chat_max_concurrency)
    # The last added is the outermost: request ids are set before the size check answers.
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(OpenAIErrors)
    app.add_middleware(CorrelationIdMiddleware, header_name=REQUEST_ID_HEADER)
    # Requests per route template and status, and their latency, in the service's own
    # registry (GET /metrics renders it); /metrics itself is left out.
    Instrumentator(
        should_group_status_codes=False,
        excluded_handlers=["/metrics"],
        registry=metrics.registry,
    ).instrument(app, metric_namespace="warmrag")

    @app.exception_handler(RequestValidationError)
    async def _invalid_input(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"detail": _issues(exc.errors())}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT
        )

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        # Starlette runs this outside the other middleware: set the request id header here.
        log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
        body = error_body("internal error", "warmrag")
        return JSONResponse(
            openai_error(500, body) if is_openai_path(request.url.path) else body,
            status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
            headers={REQUEST_ID_HEADER: body["request_id"]} if body["request_id"] else None,
        )

    @app.exception_handler(LLMError)
    async def _llm_failed(request: Request, exc: LLMError) -> JSONResponse:
        # The body names the component; URLs and exception text stay in the log.
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        headers = {"Retry-After": str(RETRY_AFTER_S)} if exc.status_code in (503, 504) else None
        return JSONResponse(
            error_body(exc.public, "vllm"), status_code=exc.status_code, headers=headers
        )

    @app.exception_handler(CollectionLeasedError)
    async def _not_the_writer(request: Request, exc: CollectionLeasedError) -> JSONResponse:
        # Nothing was written: another instance holds the shared collection's lease.
        return JSONResponse(error_body(str(exc), "qdrant"), status.HTTP_409_CONFLICT)

    @app.exception_handler(VectorIndexError)
    async def _index_stopped(request: Request, exc: VectorIndexError) -> JSONResponse:
        # The embedded index's process stopped; it starts again on the next call.
        log.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(
            error_body("the vector index restarted; try again", "vector_index"),
            status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    @app.exception_handler(OSError)
    async def _storage_error(request: Request, exc: OSError) -> JSONResponse:
        # The write was rolled back; the knowledge base is as it was before the request.
        log.error("storage error on %s: %s", request.url.path, exc)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            code, problem = status.HTTP_507_INSUFFICIENT_STORAGE, "the data folder is full"
        elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            code, problem = (
                status.HTTP_503_SERVICE_UNAVAILABLE,
                "the data folder is not writable",
            )
        else:
            code, problem = status.HTTP_500_INTERNAL_SERVER_ERROR, "a storage write failed"
        return JSONResponse(error_body(f"{problem}; nothing was changed", "storage"), code)

    return app
