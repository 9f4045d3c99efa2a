"""Admin: the bad cases (slow chats, evicted warm prefixes), grouped by similarity."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from api.deps import AdminDep, BadCasesDep
from api.schemas import ADMIN_ERRORS, error_responses
from rag.chat.bad_cases import BadCase

router = APIRouter(
    prefix="/admin/bad-cases",
    tags=["admin"],
    dependencies=[AdminDep],
    responses=error_responses(*ADMIN_ERRORS),
)


class BadCaseGroupOut(BaseModel):
    count: int
    reasons: dict[str, int] = Field(description="Cases by reason (a case may have two).")
    questions: list[str] = Field(description="Up to five of the group's distinct questions.")
    example: BadCase = Field(description="The group's first case.")


class BadCasesResponse(BaseModel):
    total: int
    ttft_threshold_ms: float
    groups: list[BadCaseGroupOut]


@router.get("", response_model=BadCasesResponse)
async def bad_cases(
    log: BadCasesDep,
    similarity: Annotated[
        float, Query(ge=0.0, le=1.0, description="Cosine from which two questions group.")
    ] = 0.8,
) -> BadCasesResponse:
    """The instance's recent bad cases grouped by question similarity, largest group
    first: chats slower than ``WARMRAG_BAD_CASE_TTFT_MS`` to their first token, and
    chats whose registered warm prefix vLLM had evicted."""
    groups = [
        BadCaseGroupOut(
            count=g.count,
            reasons=dict(g.reasons),
            questions=g.questions,
            example=g.example,
        )
        for g in log.groups(similarity)
    ]
    return BadCasesResponse(total=len(log), ttft_threshold_ms=log.ttft_threshold_ms, groups=groups)
