"""Request and response bodies of the public HTTP API (see README, design notes).

Request models are strict: a value of the wrong JSON type (``"3"`` for a number, ``"yes"``
for a boolean) is a 422, never coerced. Every route declares its responses, errors included,
so the OpenAPI schema is what clients (and the fuzz test) can rely on.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from rag.chat.results import CacheInfo, FinishReason, Timings
from rag.knowledge.input_checks import CleanText
from rag.knowledge.models import DocumentIn, Passage, duplicate_ids
from warmup.view import WarmupView

MAX_QUESTION_CHARS = 2000
MAX_DOCUMENTS_PER_REQUEST = 1000
MAX_MESSAGE_CHARS = 20_000


def _clean_question(value: str) -> str:
    if not value.strip():
        raise ValueError("question is empty")
    return value


Question = Annotated[
    CleanText,
    StringConstraints(min_length=1, max_length=MAX_QUESTION_CHARS),
    AfterValidator(_clean_question),
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True)


class ChatRequest(_Strict):
    question: Question
    stream: bool = False
    top_k: int = Field(3, ge=1, le=20)


class ChatResponse(BaseModel):
    answer: str
    passages: list[Passage]
    triples: list[list[str]]
    cache: CacheInfo
    timings: Timings
    finish_reason: FinishReason = Field(
        FinishReason.STOP,
        description="stop: the model ended the answer; length: it reached max_tokens; "
        "repeat: it began to repeat itself and was stopped there.",
    )


class IngestRequest(_Strict):
    documents: list[DocumentIn] = Field(min_length=1, max_length=MAX_DOCUMENTS_PER_REQUEST)

    @model_validator(mode="after")
    def _unique_ids(self) -> IngestRequest:
        if dupes := duplicate_ids(self.documents):
            raise ValueError(f"duplicate document ids in one request: {', '.join(dupes)}")
        return self


class IngestResponse(BaseModel):
    added: list[str]
    updated: list[str]
    unchanged: list[str]
    kb_version: int


class FileIngestResponse(IngestResponse):
    path: str
    documents: list[str] = Field(description="Ids of the documents the file held.")


class DeleteResponse(BaseModel):
    deleted: str
    removed_chunks: int
    kb_version: int


class DocumentListResponse(BaseModel):
    documents: list[str]
    count: int
    kb_version: int


# ----- OpenAI-compatible chat completions -------------------------------------------


class TextPart(BaseModel):
    """A content part; only text parts are supported (this service answers from text)."""

    type: Literal["text"]
    text: str


def _join_text_parts(content: Any) -> Any:
    """OpenAI's ``content`` is a string or a list of parts: text parts are joined with
    newlines; any other part type (images, audio, files) is refused by name."""
    if not isinstance(content, list):
        return content
    if not content:
        raise ValueError("content is an empty list of parts")
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind != "text":
            raise ValueError(f"content part {i} has type {kind!r}: only 'text' parts are supported")
        if not isinstance(part.get("text"), str):
            raise ValueError(f"content part {i}: 'text' must be a string")
        texts.append(part["text"])
    return "\n".join(texts)


class OpenAIMessage(_Strict):
    model_config = ConfigDict(strict=True, extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: Annotated[
        CleanText,
        Field(max_length=MAX_MESSAGE_CHARS),
        BeforeValidator(_join_text_parts, json_schema_input_type=str | list[TextPart]),
    ]


class OpenAIChatRequest(_Strict):
    """The subset of OpenAI's request that a RAG answer can honour; other fields are ignored."""

    model: str | None = None
    messages: list[OpenAIMessage] = Field(min_length=1, max_length=100)
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1, le=2048)
    max_completion_tokens: int | None = Field(None, ge=1, le=2048)
    temperature: float | None = Field(None, ge=0.0, le=2.0)

    @model_validator(mode="after")
    def _last_is_question(self) -> OpenAIChatRequest:
        last = self.messages[-1]
        if last.role != "user":
            raise ValueError("the last message must have role 'user': it is the question")
        if len(last.content) > MAX_QUESTION_CHARS:
            raise ValueError(f"the last user message is over {MAX_QUESTION_CHARS} characters")
        _clean_question(last.content)
        return self

    @property
    def question(self) -> str:
        return self.messages[-1].content

    @property
    def history(self) -> list[dict[str, str]]:
        return [m.model_dump() for m in self.messages[:-1]]

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class CompletionChoice(BaseModel):
    index: int
    message: CompletionMessage
    finish_reason: str | None


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class WarmragFields(BaseModel):
    """What ``/v1/chat`` returns besides the answer."""

    passages: list[Passage]
    triples: list[list[str]]
    cache: CacheInfo
    timings: Timings


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage
    warmrag: WarmragFields


# ----- warmup --------------------------------------------------------------------------


class JobOut(BaseModel):
    id: str
    next_run_time: str | None


class RegistryResponse(WarmupView):
    """Warmup's view, with the knowledge base's version and the scheduler's jobs."""

    kb_version: int
    jobs: list[JobOut]


# ----- health --------------------------------------------------------------------------


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReplicaOut(BaseModel):
    name: str
    up: bool
    kv_usage: float
    weight: float


class SharedQdrantOut(BaseModel):
    shared: bool = True
    writer: bool = Field(description="This instance holds the shared collection's write lease.")


class VLLMPlanOut(BaseModel):
    dtype: str
    enforce_eager: bool
    reason: str


class ReadyExtra(BaseModel):
    """What ``/ready`` tells besides the phase; the parts that do not apply are left out."""

    kb_version: int
    documents: int
    replicas: list[ReplicaOut] | None = None
    qdrant: SharedQdrantOut | None = None
    vllm: VLLMPlanOut | None = None


class ReadyResponse(BaseModel):
    ready: bool
    phase: str
    detail: str | None = None
    extra: ReadyExtra


# ----- errors --------------------------------------------------------------------------


class ValidationIssue(BaseModel):
    """One problem with the input: where (``loc``), what (``msg``) and its kind."""

    type: str
    loc: list[str | int]
    msg: str


class ErrorResponse(BaseModel):
    """Every error body. ``detail`` names the problem (a list of issues for invalid input);
    5xx bodies name the ``component`` that failed and the ``request_id`` to find it in the
    log, never URLs, paths or exception text."""

    detail: str | list[ValidationIssue]
    component: str | None = None
    request_id: str | None = None


_ERRORS = {
    401: "Missing or wrong credentials (admin token, or API key when keys are configured).",
    403: "Admin routes are disabled: no admin token is configured.",
    404: "No such document (or, in the graph views, entity).",
    409: "Warmup is disabled.",
    413: "The request body is over WARMRAG_MAX_REQUEST_BYTES; it was not read.",
    415: "The file's type is not one warmrag reads; the message lists those it does.",
    422: "Invalid input; `detail` names each problem. Nothing was stored.",
    429: "Over the client's chat rate or concurrency limit; see Retry-After.",
    500: "Internal error; `component` and `request_id` identify it.",
    502: "vLLM sent a malformed response.",
    503: "vLLM is unavailable (Retry-After), or the data folder is not writable.",
    504: "vLLM did not answer within the chat deadline (Retry-After).",
    507: "The data folder is full; nothing was changed.",
}

#: Errors any admin route can answer.
ADMIN_ERRORS = (401, 403, 422)
#: Errors of a chat route.
CHAT_ERRORS = (401, 413, 422, 429, 502, 503, 504)
#: Errors of a knowledge-base write.
WRITE_ERRORS = (*ADMIN_ERRORS, 413, 503, 507)


def error_responses(
    *codes: int, model: type[BaseModel] = ErrorResponse
) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error codes (and 500, which any route can answer);
    ``model``: the error body's shape (OpenAI's on the OpenAI-compatible routes)."""
    return {code: {"model": model, "description": _ERRORS[code]} for code in sorted({*codes, 500})}


def chat_responses(
    description: str,
    events: list[str] | None = None,
    error_model: type[BaseModel] = ErrorResponse,
) -> dict[int | str, Any]:
    """OpenAPI ``responses`` of a chat route: JSON, or a Server-Sent Events stream (in
    OpenAPI 3.1 the ``schema`` of ``text/event-stream`` describes one event, whose ``data``
    is a JSON text or ``[DONE]``), and the chat errors."""
    event: dict[str, Any] = {"type": "string"}
    if events:
        event["enum"] = events
    stream = {
        "type": "object",
        "properties": {"event": event, "data": {"type": "string"}},
        "required": ["data"],
    }
    return {
        200: {"description": description, "content": {"text/event-stream": {"schema": stream}}},
        **error_responses(*CHAT_ERRORS, model=error_model),
    }
