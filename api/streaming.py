"""Server-Sent Events helpers shared by the chat routes."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from fastapi.responses import StreamingResponse

from rag.llm.client import LLMError

log = logging.getLogger(__name__)
T = TypeVar("T")


def sse(data: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {payload}\n\n"


async def start_stream(
    events: AsyncIterator[T],
    encode: Callable[[T], str],
    on_error: Callable[[str, str], str],
    on_complete: Callable[[], None],
    tail: str = "",
) -> StreamingResponse:
    """Pull the first event before answering, so a vLLM that is down is a 503, not a
    broken stream; later failures end the stream with ``on_error(component, message)``
    and never with the final event, so a cut-off answer is never marked complete.

    ``on_complete`` (the chat slot's release) runs when the events are over, before the
    body's end is sent: a client that asks again as soon as the stream has ended finds its
    slot free."""
    first = await anext(events)  # errors propagate to the app's exception handlers

    async def body() -> AsyncIterator[str]:
        try:
            yield encode(first)
            async for event in events:
                yield encode(event)
            if tail:
                yield tail
        except LLMError as exc:
            log.warning("stream failed: %s", exc)
            yield on_error("vllm", exc.public)
        except Exception:
            log.exception("stream failed")
            yield on_error("warmrag", "internal error")
        finally:
            on_complete()
            await events.aclose()  # type: ignore[attr-defined]

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
