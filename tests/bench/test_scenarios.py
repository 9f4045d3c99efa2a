"""Scenario bookkeeping that needs no service: why requests after a restart missed."""

from __future__ import annotations

from bench.measure import RequestRecord
from bench.scenarios import miss_reasons


def chat(question: str, hit: bool) -> RequestRecord:
    return RequestRecord(
        question=question,
        t_s=0.0,
        ttft_ms=100.0,
        retrieval_ms=20.0,
        prompt_tokens=420,
        cached_tokens=384 if hit else 0,
    )


def test_restart_misses_are_classified_by_what_the_registry_held() -> None:
    records = [
        chat("What is Kalor known for?", hit=True),  # hits are not misses
        chat("What is Velmo known for?", hit=False),  # never asked
        chat("what is kalor known for", hit=False),  # asked (same key), registered
        chat("When was Kalor founded?", hit=False),  # asked, not registered
    ]
    asked = {"what is kalor known for", "when was kalor founded"}
    assert miss_reasons(records, asked, {"what is kalor known for"}) == {
        "never asked before": 1,
        "warm entry, prefix not (yet) warm": 1,
        "asked before, no warm entry": 1,
    }
    assert miss_reasons(records, asked, None) == {
        "never asked before": 1,
        "asked before, cache emptied": 2,
    }
