"""What stands between a request and the routes: a body-size limit, strict JSON decoding,
and per-client chat limits.

- ``BodySizeLimit`` (ASGI middleware): a body over the limit is a 413, refused on its
  ``Content-Length`` before a byte is read, or as soon as a chunked body passes the limit;
  nothing is parsed. Starlette has no such limit and the ASGI servers' own limits are off by
  default, so it is a few lines here.
- ``StrictJSONRoute``: request bodies are decoded with
  ``rag.knowledge.input_checks.loads_json`` (NaN, Infinity, lone surrogates, NUL, deep
  nesting refused with a 422 that says where) before FastAPI validates them.
- ``ChatLimiter``: per-client chat rate (the ``limits`` package's moving window, in memory)
  and chats in flight, each a 429 with Retry-After. slowapi, the FastAPI wrapper of
  ``limits``, wants a decorator with a module-level limiter and its own 429 body; the
  limits here are settings of one app and answer in the API's error shape, so ``limits`` is
  used directly.
"""

from __future__ import annotations

import email.message
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from limits import parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag.knowledge.input_checks import JSONInputError, loads_json


class BodySizeLimit:
    """Refuse request bodies over ``max_bytes`` with 413, unread."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.problem = (
            f"request body is over {max_bytes} bytes (WARMRAG_MAX_REQUEST_BYTES); "
            "send fewer or smaller documents per request"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            response = JSONResponse(
                {"detail": self.problem}, status.HTTP_413_CONTENT_TOO_LARGE, {"Connection": "close"}
            )
            await response(scope, receive, send)
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the route's body read; FastAPI passes HTTPException on.
                    raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, self.problem)
            return message

        await self.app(scope, counted_receive, send)


def is_json_media_type(content_type: str | None) -> bool:
    """The media types FastAPI decodes as JSON."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class StrictJSONRoute(APIRoute):
    """An ``APIRoute`` whose JSON bodies are decoded by ``loads_json``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict_handler(request: Request) -> Response:
            if is_json_media_type(request.headers.get("content-type")):
                body = await request.body()
                if body:
                    try:
                        parsed = loads_json(body)
                    except JSONInputError as exc:
                        kind = "value_error" if exc.loc else "json_invalid"
                        issue = {"type": kind, "loc": ("body", *exc.loc)}
                        raise RequestValidationError([{**issue, "msg": exc.message}]) from None
                    # Starlette caches the decoded body here; FastAPI's ``request.json()``
                    # returns it instead of decoding the body again, leniently.
                    request._json = parsed
            return await handler(request)

        return strict_handler


def too_many_requests(problem: str, retry_after_s: int) -> HTTPException:
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS, problem, headers={"Retry-After": str(retry_after_s)}
    )


class ChatSlot:
    """One chat's hold on one of its client's slots.

    ``release`` gives the slot back at once, and only once. A route releases it as soon as
    its answer is complete, before the answer's last bytes go out: the dependency's exit
    runs only after the response has been sent, so a client that asked again the moment it
    had read an answer was refused (a 429) for the answer it had just been given. The exit
    still releases what a route did not (a failure, a client gone).
    """

    def __init__(self, active: Counter[str], client: str) -> None:
        self._active = active
        self._client = client
        self._held = True

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        self._active[self._client] -= 1
        if self._active[self._client] <= 0:
            del self._active[self._client]


class ChatLimiter:
    """Per-client chat limits, both off unless configured: a rate in ``limits``' notation
    (``"5/second;100/minute"``) and a number of chats in flight."""

    def __init__(self, rate: str | None = None, max_concurrency: int | None = None) -> None:
        self.items = parse_many(rate) if rate else []
        self.max_concurrency = max_concurrency
        self._window = MovingWindowRateLimiter(MemoryStorage())
        self._active: Counter[str] = Counter()

    @asynccontextmanager
    async def slot(self, client: str) -> AsyncIterator[ChatSlot]:
        """Hold one of ``client``'s chat slots (429 when over a limit) until it is released
        or the block ends."""
        if self.max_concurrency is not None and self._active[client] >= self.max_concurrency:
            raise too_many_requests(
                f"too many chats in flight: at most {self.max_concurrency} per client", 1
            )
        self._take_rate(client)
        self._active[client] += 1
        held = ChatSlot(self._active, client)
        try:
            yield held
        finally:
            held.release()

    def in_flight(self, client: str) -> int:
        """Chats of ``client`` holding a slot now."""
        return self._active[client]

    def _take_rate(self, client: str) -> None:
        over = [item for item in self.items if not self._window.test(item, client)]
        if not over:
            for item in self.items:
                self._window.hit(item, client)
            return
        reset = max(self._window.get_window_stats(item, client).reset_time for item in over)
        raise too_many_requests(
            f"chat rate limit reached ({'; '.join(str(i) for i in over)} per client)",
            max(1, math.ceil(reset - time.time())),
        )
