"""Bad cases: the chats an operator should look at, kept with what explains them.

The cold-start design asks for every slow request and every miss that should have been
a hit to be kept with its fingerprint (query key, context fingerprint, cache state,
timings) and grouped by similarity, so that a run of misses on one kind of question
shows up as one group with a count. Two kinds are recorded:

- ``slow``: the first token came later than the SLO threshold (``bad_case_ttft_ms``);
- ``evicted``: the prefix was registered warm but vLLM no longer had all of it.

The log is in memory and bounded (the oldest case goes first): it is for looking at
what happens now, and the metrics keep the counts. Grouping is greedy leader
clustering on the questions' embeddings (each case, oldest first, joins the group whose
leader is most similar to it if that is at least ``similarity``, else leads a new
one): deterministic, a few lines, and a few milliseconds for a thousand cases, where a
clustering library would add a dependency for no better answer.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from rag.chat.results import WarmState


class BadCaseReason(StrEnum):
    SLOW = "slow"
    EVICTED = "evicted"


class BadCase(BaseModel):
    """One bad chat: what was asked, which context it got, the cache, the timings (ms).
    The admin API returns it as it is, without its question's embedding."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    at: float = Field(description="When it was answered (seconds since the epoch).")
    question: str
    query_key: str
    context_fingerprint: str
    reasons: tuple[BadCaseReason, ...]
    warm_state: WarmState
    prompt_tokens: int
    cached_tokens: int
    ttft_ms: float
    retrieval_ms: float
    llm_ttft_ms: float
    embedding: SkipJsonSchema[np.ndarray] = Field(exclude=True, repr=False)


@dataclass
class BadCaseGroup:
    """Similar bad cases: how many, why, and the first of them as the example."""

    example: BadCase
    count: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    questions: list[str] = field(default_factory=list)

    def add(self, case: BadCase, max_questions: int) -> None:
        self.count += 1
        self.reasons.update(case.reasons)
        if case.question not in self.questions and len(self.questions) < max_questions:
            self.questions.append(case.question)


class BadCaseLog:
    """The last ``max_cases`` bad chats of this instance."""

    def __init__(
        self,
        ttft_threshold_ms: float,
        max_cases: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttft_threshold_ms = ttft_threshold_ms
        self._cases: deque[BadCase] = deque(maxlen=max_cases)
        self._clock = clock

    def __len__(self) -> int:
        return len(self._cases)

    def reasons(self, ttft_ms: float, warm_state: WarmState) -> tuple[BadCaseReason, ...]:
        """Why a chat is a bad case; empty when it is not one."""
        found = []
        if ttft_ms > self.ttft_threshold_ms:
            found.append(BadCaseReason.SLOW)
        if warm_state is WarmState.EVICTED:
            found.append(BadCaseReason.EVICTED)
        return tuple(found)

    def record(
        self,
        *,
        question: str,
        query_key: str,
        embedding: np.ndarray,
        context_fingerprint: str,
        warm_state: WarmState,
        prompt_tokens: int,
        cached_tokens: int,
        ttft_ms: float,
        retrieval_ms: float,
        llm_ttft_ms: float,
    ) -> BadCase | None:
        """Keep the chat if it is a bad case; returns it (None when it is not one)."""
        reasons = self.reasons(ttft_ms, warm_state)
        if not reasons:
            return None
        case = BadCase(
            at=self._clock(),
            question=question,
            query_key=query_key,
            context_fingerprint=context_fingerprint,
            reasons=reasons,
            warm_state=warm_state,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            ttft_ms=round(ttft_ms, 1),
            retrieval_ms=round(retrieval_ms, 1),
            llm_ttft_ms=round(llm_ttft_ms, 1),
            embedding=np.asarray(embedding, dtype=np.float32),
        )
        self._cases.append(case)
        return case

    def cases(self) -> list[BadCase]:
        """Oldest first."""
        return list(self._cases)

    def groups(self, similarity: float = 0.8, max_questions: int = 5) -> list[BadCaseGroup]:
        """The cases grouped by question similarity (cosine of their embeddings), the
        largest group first; ties keep the order in which groups started."""
        cases = list(self._cases)  # a snapshot: chats may add cases meanwhile
        if not cases:
            return []
        vectors = np.stack([c.embedding for c in cases])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1.0)
        groups: list[BadCaseGroup] = []
        leaders = np.empty((len(cases), vectors.shape[1]), dtype=np.float32)
        for case, vector in zip(cases, vectors, strict=True):
            scores = leaders[: len(groups)] @ vector
            best = int(np.argmax(scores)) if len(groups) else -1
            if best < 0 or scores[best] < similarity:
                leaders[len(groups)] = vector
                groups.append(BadCaseGroup(example=case))
                best = len(groups) - 1
            groups[best].add(case, max_questions)
        return sorted(groups, key=lambda g: -g.count)
