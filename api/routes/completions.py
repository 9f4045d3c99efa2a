"""``POST /v1/chat/completions``: OpenAI-compatible, RAG applied to the last user message."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi.responses import StreamingResponse

from api.deps import EngineDep, HeldSlotDep, SettingsDep
from api.openai_errors import OpenAIErrorResponse
from api.routes.chat import chat_router, to_response
from api.schemas import (
    ChatCompletionResponse,
    CompletionChoice,
    CompletionMessage,
    CompletionUsage,
    OpenAIChatRequest,
    PromptTokensDetails,
    WarmragFields,
    chat_responses,
)
from api.streaming import sse, start_stream
from rag.chat.results import ChatResult, FinishReason
from rag.llm.client import TextDelta

router = chat_router("openai")


def _usage(result: ChatResult) -> CompletionUsage:
    u = result.usage
    return CompletionUsage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        total_tokens=u.prompt_tokens + u.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=u.cached_tokens),
    )


def _warmrag(result: ChatResult) -> WarmragFields:
    r = to_response(result)
    return WarmragFields(passages=r.passages, triples=r.triples, cache=r.cache, timings=r.timings)


def openai_finish_reason(reason: FinishReason) -> str:
    """OpenAI's clients know ``stop`` and ``length``: an answer stopped where it began to
    repeat itself ended as the service chose, a ``stop``."""
    return "length" if reason is FinishReason.LENGTH else "stop"


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletionResponse,
    responses=chat_responses(
        "JSON, or with `stream: true` Server-Sent Events: `chat.completion.chunk` objects, "
        "the last with `usage` and `warmrag`, then `[DONE]`. Errors in OpenAI's shape.",
        error_model=OpenAIErrorResponse,
    ),
)
async def chat_completions(
    request: OpenAIChatRequest, engine: EngineDep, settings: SettingsDep, slot: HeldSlotDep
) -> ChatCompletionResponse | StreamingResponse:
    """The answer in OpenAI's shape; ``warmrag`` carries passages, triples, cache, timings.
    ``content`` may be a string or a list of ``{"type": "text", "text": ...}`` parts
    (joined with newlines); other part types are refused."""
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    model = settings.served_model_name
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
                    openai_finish_reason(event.finish_reason),
                    usage=_usage(event).model_dump(mode="json"),
                    warmrag=_warmrag(event).model_dump(mode="json"),
                )
            )

        return await start_stream(
            engine.stream(request.question, endpoint="openai_stream", **options),
            encode,
            lambda component, message: sse(
                {"error": {"message": message, "type": "server_error", "component": component}}
            ),
            on_complete=slot.release,
            tail=sse("[DONE]"),
        )

    result = await engine.answer(request.question, endpoint="openai", **options)
    slot.release()
    return ChatCompletionResponse(
        id=completion_id,
        created=created,
        model=model,
        choices=[
            CompletionChoice(
                index=0,
                message=CompletionMessage(content=result.answer),
                finish_reason=openai_finish_reason(result.finish_reason),
            )
        ],
        usage=_usage(result),
        warmrag=_warmrag(result),
    )
