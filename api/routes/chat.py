"""``POST /v1/chat``: the RAG answer with passages, triples, cache facts and timings."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from api.deps import ChatSlotDep, EngineDep, HeldSlotDep
from api.guards import StrictJSONRoute
from api.schemas import ChatRequest, ChatResponse, chat_responses
from api.streaming import sse, start_stream
from rag.chat.results import ChatResult
from rag.llm.client import TextDelta


def chat_router(tag: str) -> APIRouter:
    """A router for chat routes: strict JSON bodies, per-client chat limits (the app adds
    the API-key check while keys are configured)."""
    return APIRouter(tags=[tag], route_class=StrictJSONRoute, dependencies=[ChatSlotDep])


router = chat_router("chat")


def to_response(result: ChatResult) -> ChatResponse:
    return ChatResponse(
        answer=result.answer,
        passages=result.passages,
        triples=[[f.subject, f.predicate, f.object] for f in result.facts],
        cache=result.cache,
        timings=result.timings,
        finish_reason=result.finish_reason,
    )


def _encode(event: TextDelta | ChatResult) -> str:
    if isinstance(event, TextDelta):
        return sse({"text": event.text}, event="token")
    return sse(to_response(event).model_dump(mode="json"), event="done")


@router.post(
    "/v1/chat",
    response_model=ChatResponse,
    responses=chat_responses(
        'JSON, or with `stream: true` Server-Sent Events: `token` events (`{"text"}`), '
        "then one `done` event (the whole response), or an `error` event.",
        ["token", "done", "error"],
    ),
)
async def chat(
    request: ChatRequest, engine: EngineDep, slot: HeldSlotDep
) -> ChatResponse | StreamingResponse:
    """Answer from the top-k passages. With ``stream: true``: Server-Sent Events, ``token``
    events with text, then one ``done`` event with the whole response."""
    if request.stream:
        events = engine.stream(request.question, top_k=request.top_k, endpoint="chat_stream")
        return await start_stream(
            events,
            _encode,
            lambda component, message: sse(
                {"error": message, "component": component}, event="error"
            ),
            on_complete=slot.release,
        )
    result = await engine.answer(request.question, top_k=request.top_k)
    slot.release()
    return to_response(result)
