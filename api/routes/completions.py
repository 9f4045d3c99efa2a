"""``POST /v1/chat/completions``: OpenAI-compatible, RAG applied to the last user message."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter

from api.deps import EngineDep, RuntimeDep
from api.routes.chat import to_response
from api.schemas import OpenAIChatRequest
from api.streaming import sse, start_stream
from rag.chat import ChatResult
from rag.llm import TextDelta

router = APIRouter(tags=["openai"])


def _usage(result: ChatResult) -> dict[str, Any]:
    u = result.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


@router.post("/v1/chat/completions", responses={503: {"description": "vLLM is unreachable"}})
async def chat_completions(
    request: OpenAIChatRequest, engine: EngineDep, runtime: RuntimeDep
) -> Any:
    """The answer in OpenAI's shape; ``warmrag`` carries passages, triples, cache, timings."""
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    model = runtime.settings.served_model_name
    options: dict[str, Any] = {
        "history": request.history,
        "max_tokens": request.token_limit,
        "temperature": request.temperature,
    }

    def chunk(delta: dict[str, str], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    if request.stream:

        def encode(event: TextDelta | ChatResult) -> str:
            if isinstance(event, TextDelta):
                return sse(chunk({"content": event.text}))
            return sse(
                chunk(
                    {},
                    event.finish_reason,
                    usage=_usage(event),
                    warmrag=to_response(event).model_dump(mode="json", exclude={"answer"}),
                )
            )

        return await start_stream(
            engine.stream(request.question, endpoint="openai_stream", **options),
            encode,
            lambda component, message: sse(
                {"error": {"message": message, "type": "server_error", "component": component}}
            ),
            tail=sse("[DONE]"),
        )

    result = await engine.answer(request.question, endpoint="openai", **options)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.answer},
                "finish_reason": result.finish_reason,
            }
        ],
        "usage": _usage(result),
        "warmrag": to_response(result).model_dump(mode="json", exclude={"answer"}),
    }
