"""Errors of the OpenAI-compatible routes in OpenAI's shape.

OpenAI clients read ``{"error": {"message", "type", "param", "code"}}`` and raise their
typed exceptions with that message; warmrag's own shape (``{"detail": ...}``) reaches
their users as an opaque body. ``OpenAIErrors`` rewrites every JSON error body under the
OpenAI paths, whichever part of the app produced it (validation, authentication, rate
limits, the body-size limit, vLLM failures), so no error path can be missed; the
handler of unexpected exceptions runs outside all middleware and calls
``openai_error`` itself. The status codes stay as they are.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.guards import is_json_media_type
from api.schemas import ValidationIssue

#: Path prefixes whose errors take OpenAI's shape.
OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")

#: Error types and codes as OpenAI's API sends them (a 4xx not listed is an
#: ``invalid_request_error``, a 5xx a ``server_error``). The only 404 under these paths
#: is a model that is not served.
_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
}
_CODES = {
    401: "invalid_api_key",
    404: "model_not_found",
    413: "request_too_large",
    422: "invalid_request",
    429: "rate_limit_exceeded",
    502: "bad_upstream_response",
    503: "service_unavailable",
    504: "upstream_timeout",
}


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    #: On 422: each problem with the input (``type``, ``loc``, ``msg``), as warmrag's
    #: own routes list them.
    issues: list[ValidationIssue] | None = None
    #: On 5xx: the failing component and the request id to find it in the log.
    component: str | None = None
    request_id: str | None = None


class OpenAIErrorResponse(BaseModel):
    """The error body of ``/v1/chat/completions`` and ``/v1/models``, as OpenAI's API
    sends it."""

    error: OpenAIErrorDetail


def is_openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PATHS)


def _location(loc: Any) -> str:
    parts = [str(p) for p in loc or () if p != "body"]
    return ".".join(parts)


def _issue_text(issue: dict[str, Any]) -> str:
    """``field: problem``; a problem with the whole body (``loc`` is just ``body``) has
    no field."""
    where = _location(issue.get("loc"))
    problem = str(issue.get("msg", "invalid"))
    return f"{where}: {problem}" if where else problem


def _issues(items: list[dict[str, Any]] | None) -> list[ValidationIssue] | None:
    """The validation issues, or None when there are none or they are not in warmrag's
    shape (the response is already under way: reshaping must not fail)."""
    try:
        return [ValidationIssue.model_validate(i) for i in items] if items else None
    except ValueError:
        return None


def openai_error(status: int, body: Any) -> dict[str, Any]:
    """``body`` (warmrag's error shape: ``detail``, maybe ``component``, ``request_id``)
    in OpenAI's shape. A list of validation issues becomes one message; the first
    issue's field is ``param``."""
    detail = body.get("detail") if isinstance(body, dict) else None
    param: str | None = None
    issues: list[dict[str, Any]] | None = None
    if isinstance(detail, list) and detail:
        issues = [i for i in detail if isinstance(i, dict)]
        message = "; ".join(_issue_text(i) for i in issues)
        if issues:
            param = _location(issues[0].get("loc")) or None
    else:
        message = str(detail) if detail is not None else f"HTTP {status}"
    error = OpenAIErrorDetail(
        message=message,
        type=_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        param=param,
        code=_CODES.get(status),
        issues=_issues(issues),
        component=body.get("component") if isinstance(body, dict) else None,
        request_id=body.get("request_id") if isinstance(body, dict) else None,
    )
    # OpenAI always sends ``param`` and ``code`` (null when empty); the extras only when set.
    fields = error.model_dump(mode="json")
    extras = ("issues", "component", "request_id")
    return {"error": {k: v for k, v in fields.items() if k not in extras or v is not None}}


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(
        k.lower() == b"content-type" and is_json_media_type(v.decode("latin-1")) for k, v in headers
    )


class OpenAIErrors:
    """ASGI middleware: JSON error responses under ``OPENAI_PATHS`` rewritten by
    ``openai_error``; everything else (successes, streams) passes through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_openai_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body = bytearray()

        async def reshape(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if message["status"] >= 400 and _is_json(list(message.get("headers", []))):
                    start = message  # held until the body is complete
                    return
            elif start is not None and message["type"] == "http.response.body":
                body.extend(message.get("body", b""))
                if message.get("more_body"):
                    return
                status = int(start["status"])
                try:
                    original = json.loads(body)
                except ValueError:
                    original = {"detail": body.decode("utf-8", "replace")}
                payload = json.dumps(openai_error(status, original)).encode()
                headers = [
                    (k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"
                ]
                headers.append((b"content-length", str(len(payload)).encode()))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": payload})
                return
            await send(message)

        await self.app(scope, receive, reshape)
