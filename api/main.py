"""The FastAPI application."""

from __future__ import annotations

import errno
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from api.config import Settings
from api.routes import chat, completions, documents, health, kg, warmup
from api.runtime import Runtime
from rag.embedding import Embedder
from rag.llm import LLMEngine, LLMError

log = logging.getLogger(__name__)

#: Seconds a client should wait before retrying a chat that vLLM could not take.
RETRY_AFTER_S = 5


def create_app(
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    llm: LLMEngine | None = None,
) -> FastAPI:
    """``llm`` replaces the vLLM client (tests pass a fake engine); nothing else differs."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime(settings, embedder=embedder, llm=llm)
        app.state.runtime = runtime
        await runtime.open()
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

    @app.exception_handler(LLMError)
    async def _llm_failed(request: Request, exc: LLMError) -> JSONResponse:
        # The body names the component; URLs and exception text stay in the log.
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        headers = {"Retry-After": str(RETRY_AFTER_S)} if exc.status_code in (503, 504) else None
        return JSONResponse(
            {"detail": exc.public, "component": "vllm"},
            status_code=exc.status_code,
            headers=headers,
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
        return JSONResponse(
            {"detail": f"{problem}; nothing was changed", "component": "storage"},
            status_code=code,
        )

    return app
