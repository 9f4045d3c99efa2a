"""The FastAPI application."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from api.config import Settings
from api.routes import chat, completions, documents, health, kg, warmup
from api.runtime import Runtime
from rag.embedding import Embedder
from rag.llm import LLMRequestError, LLMUnavailableError

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, embedder: Embedder | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime(settings, embedder=embedder)
        app.state.runtime = runtime
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
    for module in (health, chat, completions, documents, kg, warmup):
        app.include_router(module.router)

    @app.exception_handler(LLMUnavailableError)
    async def _llm_down(request: Request, exc: LLMUnavailableError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_503_SERVICE_UNAVAILABLE)

    @app.exception_handler(LLMRequestError)
    async def _llm_rejected(request: Request, exc: LLMRequestError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(OSError)
    async def _storage_error(request: Request, exc: OSError) -> JSONResponse:
        # The write was rolled back; the knowledge base is as it was before the request.
        log.error("storage error on %s: %s", request.url.path, exc)
        return JSONResponse(
            {"detail": f"storage error, nothing was changed: {exc}"},
            status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    return app
