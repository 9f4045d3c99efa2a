"""The bad-case log: which chats it keeps, and how it groups them."""

from __future__ import annotations

import numpy as np

from rag.chat.bad_cases import BadCaseLog, BadCaseReason, WarmState
from rag.chat.query import normalize_query


def vec(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def record(log: BadCaseLog, question: str, embedding: np.ndarray, **overrides: object) -> object:
    values: dict[str, object] = {
        "question": question,
        "query_key": normalize_query(question),
        "embedding": embedding,
        "context_fingerprint": "ctx",
        "warm_state": WarmState.COLD,
        "prompt_tokens": 800,
        "cached_tokens": 0,
        "ttft_ms": 4500.0,
        "retrieval_ms": 40.0,
        "llm_ttft_ms": 4400.0,
    }
    values.update(overrides)
    return log.record(**values)  # type: ignore[arg-type]


def test_slow_chats_and_evicted_prefixes_are_kept_fast_ones_are_not() -> None:
    log = BadCaseLog(ttft_threshold_ms=1000.0, clock=lambda: 123.0)
    assert record(log, "fast and cold", vec(1, 0), ttft_ms=300.0) is None
    assert record(log, "fast and warm", vec(1, 0), ttft_ms=300.0, warm_state=WarmState.HIT) is None
    slow = record(log, "Slow  Question?", vec(1, 0))
    evicted = record(log, "evicted", vec(0, 1), ttft_ms=900.0, warm_state=WarmState.EVICTED)
    both = record(log, "both", vec(0, 1), warm_state=WarmState.EVICTED)
    assert [c.reasons for c in log.cases()] == [
        (BadCaseReason.SLOW,),
        (BadCaseReason.EVICTED,),
        (BadCaseReason.SLOW, BadCaseReason.EVICTED),
    ]
    assert log.cases() == [slow, evicted, both]
    first = log.cases()[0]
    assert first.query_key == "slow question" and first.at == 123.0  # the one normalization


def test_similar_questions_group_largest_first() -> None:
    log = BadCaseLog(ttft_threshold_ms=1.0)
    record(log, "where is the zorn", vec(1, 0, 0))
    record(log, "what is bread made of", vec(0, 1, 0))
    record(log, "where does the zorn flow", vec(0.95, 0.1, 0))
    record(log, "the zorn flows where", vec(0.9, 0, 0.2))
    record(log, "where does the zorn flow", vec(0.95, 0.1, 0), warm_state=WarmState.EVICTED)
    groups = log.groups(similarity=0.8)
    assert [g.count for g in groups] == [4, 1]
    zorn = groups[0]
    assert zorn.example.question == "where is the zorn"
    assert zorn.questions == [
        "where is the zorn",
        "where does the zorn flow",
        "the zorn flows where",
    ]
    assert zorn.reasons == {"slow": 4, "evicted": 1}
    # a stricter similarity splits them; 0 puts everything in one group
    assert len(log.groups(similarity=0.999)) == 4
    assert [g.count for g in log.groups(similarity=0.0)] == [5]


def test_the_log_is_bounded_oldest_out() -> None:
    log = BadCaseLog(ttft_threshold_ms=1.0, max_cases=3)
    for i in range(5):
        record(log, f"q{i}", vec(1, i))
    assert [c.question for c in log.cases()] == ["q2", "q3", "q4"]
    assert len(log) == 3
