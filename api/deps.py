"""FastAPI dependencies: the runtime's parts and admin authentication."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.runtime import Runtime
from rag.chat import ChatEngine
from rag.knowledge_base import KnowledgeBase


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_engine(runtime: RuntimeDep) -> ChatEngine:
    return runtime.engine


def get_kb(runtime: RuntimeDep) -> KnowledgeBase:
    return runtime.kb


EngineDep = Annotated[ChatEngine, Depends(get_engine)]
KBDep = Annotated[KnowledgeBase, Depends(get_kb)]

_bearer = HTTPBearer(auto_error=False)


def require_admin(
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Admin routes are closed unless WARMRAG_ADMIN_TOKEN is set and presented."""
    expected = runtime.settings.admin_token
    if expected is None or not expected.get_secret_value():
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "admin routes are disabled: no admin token is configured (set WARMRAG_ADMIN_TOKEN)",
        )
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing admin token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not secrets.compare_digest(
        credentials.credentials.encode(), expected.get_secret_value().encode()
    ):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "wrong admin token",
            headers={"WWW-Authenticate": "Bearer"},
        )


AdminDep = Depends(require_admin)
