"""FastAPI dependencies: one per part of the runtime a route needs, and authentication.

Routes take the narrow dependency they use (``KnowledgeDep``, ``EngineDep``, ...), not the
whole ``Runtime``; only ``/ready``, which reports on the runtime itself, takes that.

All are ``async``, though none awaits: FastAPI runs a plain ``def`` dependency in a worker
thread, a round trip each (``tests/api/test_deps.py`` has the measurement and keeps it so).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.config import Settings
from api.guards import ChatLimiter, ChatSlot
from api.metrics import ServiceMetrics
from api.runtime import Runtime
from kg.store import KnowledgeGraph
from rag.chat.bad_cases import BadCaseLog
from rag.chat.engine import ChatEngine
from rag.chat.retriever import Retriever
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.service import KnowledgeService
from warmup.scheduler import WarmupScheduler
from warmup.service import WarmupService


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_settings(runtime: RuntimeDep) -> Settings:
    return runtime.settings


async def get_engine(runtime: RuntimeDep) -> ChatEngine:
    return runtime.engine


async def get_kb(runtime: RuntimeDep) -> KnowledgeBase:
    return runtime.kb


async def get_knowledge(runtime: RuntimeDep) -> KnowledgeService:
    return runtime.knowledge


async def get_graph(runtime: RuntimeDep) -> KnowledgeGraph:
    return runtime.graph


async def get_retriever(runtime: RuntimeDep) -> Retriever:
    return runtime.retriever


async def get_metrics(runtime: RuntimeDep) -> ServiceMetrics:
    return runtime.metrics


async def get_bad_cases(runtime: RuntimeDep) -> BadCaseLog:
    return runtime.bad_cases


async def get_scheduler(runtime: RuntimeDep) -> WarmupScheduler | None:
    """None until start-up has started the scheduler."""
    return runtime.scheduler


async def get_warmup(runtime: RuntimeDep) -> WarmupService:
    """The warmup service once it runs: 409 while warmup is off, 503 before it started."""
    if runtime.warmup is None:
        raise HTTPException(status.HTTP_409_CONFLICT, "warmup is disabled (WARMRAG_WARMUP_ENABLED)")
    if not runtime.warmup.started:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            f"warmup is not started yet ({runtime.phase.value})",
            headers={"Retry-After": "5"},
        )
    return runtime.warmup


SettingsDep = Annotated[Settings, Depends(get_settings)]
EngineDep = Annotated[ChatEngine, Depends(get_engine)]
KBDep = Annotated[KnowledgeBase, Depends(get_kb)]
KnowledgeDep = Annotated[KnowledgeService, Depends(get_knowledge)]
GraphDep = Annotated[KnowledgeGraph, Depends(get_graph)]
RetrieverDep = Annotated[Retriever, Depends(get_retriever)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
BadCasesDep = Annotated[BadCaseLog, Depends(get_bad_cases)]
SchedulerDep = Annotated[WarmupScheduler | None, Depends(get_scheduler)]
WarmupDep = Annotated[WarmupService, Depends(get_warmup)]

# ----- authentication ---------------------------------------------------------------------

_admin_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="AdminToken",
    description="WARMRAG_ADMIN_TOKEN; admin routes refuse (403) while it is unset.",
)
_api_key_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="APIKey",
    description="One of WARMRAG_API_KEYS; needed only when keys are configured.",
)
Credentials = HTTPAuthorizationCredentials | None


def _unauthorized(problem: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, problem, headers={"WWW-Authenticate": "Bearer"}
    )


def _matches(presented: str, expected: str) -> bool:
    return secrets.compare_digest(presented.encode(), expected.encode())


async def require_admin(
    settings: SettingsDep, credentials: Annotated[Credentials, Depends(_admin_bearer)]
) -> None:
    """Admin routes are closed unless WARMRAG_ADMIN_TOKEN is set (not blank) and presented."""
    expected = settings.admin_token
    if expected is None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "admin routes are disabled: no admin token is configured (set WARMRAG_ADMIN_TOKEN)",
        )
    if credentials is None:
        raise _unauthorized("missing admin token: send 'Authorization: Bearer <token>'")
    if not _matches(credentials.credentials, expected.get_secret_value()):
        raise _unauthorized("wrong admin token")


AdminDep = Depends(require_admin)


async def require_api_key(
    settings: SettingsDep, credentials: Annotated[Credentials, Depends(_api_key_bearer)]
) -> None:
    """``/v1/*`` needs one of WARMRAG_API_KEYS (401 otherwise). The app adds this to the
    chat routes only while keys are configured, so its OpenAPI schema says whether they
    need a key."""
    keys = settings.api_keys
    if not keys:
        return
    if credentials is None:
        raise _unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    # Compare with every key, so the time taken does not tell which one matched.
    matched = [_matches(credentials.credentials, key.get_secret_value()) for key in keys]
    if not any(matched):
        raise _unauthorized("wrong API key")


async def client_identity(request: Request, settings: SettingsDep) -> str:
    """Who a chat is from, for per-client limits: its API key (hashed; ``require_api_key``
    has checked it) when keys are configured, else the peer's address."""
    if settings.api_keys:
        presented = request.headers.get("authorization", "")
        return "key:" + hashlib.sha256(presented.encode()).hexdigest()[:16]
    return f"ip:{request.client.host if request.client else 'unknown'}"


ClientDep = Annotated[str, Depends(client_identity)]


async def get_chat_limiter(request: Request) -> ChatLimiter:
    limiter: ChatLimiter = request.app.state.chat_limiter
    return limiter


async def chat_slot(
    client: ClientDep, limiter: Annotated[ChatLimiter, Depends(get_chat_limiter)]
) -> AsyncIterator[ChatSlot]:
    """Per-client rate and concurrency limits on chats (429 with Retry-After). The slot is
    held until the route releases it, its answer complete, or else until the response has
    been sent."""
    async with limiter.slot(client) as held:
        yield held


ApiKeyDep = Depends(require_api_key)
ChatSlotDep = Depends(chat_slot)
"""Every chat router's dependency: no chat route can go unlimited."""
HeldSlotDep = Annotated[ChatSlot, ChatSlotDep]
"""The same slot (FastAPI solves a dependency once a request), for a route to release."""
