"""Request and response bodies of the public HTTP API (see README, design notes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from rag.models import DocumentIn, Passage

MAX_QUESTION_CHARS = 2000


def _clean_question(value: str) -> str:
    if not value.strip():
        raise ValueError("question is empty")
    return value


class ChatRequest(BaseModel):
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    stream: bool = False
    top_k: int = Field(3, ge=1, le=20)

    _check_question = field_validator("question")(_clean_question)


class CacheOut(BaseModel):
    prompt_tokens: int
    cached_tokens: int
    warm_hit: bool


class TimingsOut(BaseModel):
    retrieval_ms: float
    ttft_ms: float
    total_ms: float


class ChatResponse(BaseModel):
    answer: str
    passages: list[Passage]
    triples: list[list[str]]
    cache: CacheOut
    timings: TimingsOut


class IngestRequest(BaseModel):
    documents: list[DocumentIn] = Field(min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _unique_ids(self) -> IngestRequest:
        seen: set[str] = set()
        dupes = sorted({d.id for d in self.documents if d.id in seen or seen.add(d.id)})  # type: ignore[func-returns-value]
        if dupes:
            raise ValueError(f"duplicate document ids in one request: {', '.join(dupes)}")
        return self


class IngestResponse(BaseModel):
    added: list[str]
    updated: list[str]
    unchanged: list[str]
    kb_version: int


class DeleteResponse(BaseModel):
    deleted: str
    removed_chunks: int
    kb_version: int


# ----- OpenAI-compatible chat completions -------------------------------------------


class OpenAIMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=20_000)


class OpenAIChatRequest(BaseModel):
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


class ReadyResponse(BaseModel):
    ready: bool
    phase: str
    detail: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
