"""The real-corpus section of the report: its targets judged within the section, its
tables written. The numbers are made up; the judgement and layout are under test."""

from __future__ import annotations

from typing import Any

from bench.report.real import real_markdown, real_targets
from tests.bench.test_report import strategy


def row(client: float, tokens: int, cached: int) -> dict[str, Any]:
    parts = ("hop_ms", "retrieval_ms", "prompt_ms", "to_vllm_ms", "queue_ms", "prefill_ms")
    median = {p: 1.0 for p in parts}
    median.update(client_ttft_ms=client, vllm_ttft_ms=client - 5, prompt_tokens=tokens,
                  cached_tokens=cached)  # fmt: skip
    return {"n": 4, "hits": 4 if cached else 0, "reused": 0, "median": median}


def real(ours_restart_ms: float, recall: float) -> dict[str, Any]:
    quality = {
        k: {"recall_at_1": r, "recall_at_3": r, "recall_at_10": r, "mrr": r,
            "gold_text_in_prompt": r}
        for k, r in (("warmrag", recall), ("warmrag_windows_off", recall),
                     ("llamaindex_defaults", 0.5))
    }  # fmt: skip
    return {
        "real": {
            "corpus": {
                "sections": 3,
                "words": 900,
                "words_per_section": {"median": 300},
                "sources": 2,
                "asked_questions": 2,
            },
            "floor": {"n": 3, "ttft_ms": [100.0, 110.0, 120.0]},
            "quality": quality,
            "strategies": {
                "s1": strategy(1, 900.0, 900.0, hits=False),
                "s4": strategy(4, 120.0, ours_restart_ms, hits=True),
            },
            "variants": {"default": {"misses": row(900, 1300, 0), "hits": row(130, 1300, 1280)}},
            "answers": {"n": 2, "identical": 2},
        }
    }


def test_met_targets_on_the_real_corpus() -> None:
    targets = {t.name: t for t in real_targets(real(120.0, 0.8))}
    assert all(t.met for t in targets.values()), targets
    assert "real: recall@3 vs llama-index defaults" in targets
    assert targets["real: restart, mean TTFT vs strategy 1"].measured.startswith("7.50x")


def test_missed_targets_on_the_real_corpus_say_why() -> None:
    targets = {t.name: t for t in real_targets(real(450.0, 0.6))}
    ratio = targets["real: restart, mean TTFT vs strategy 1"]
    assert ratio.met is False and "2.00x" in ratio.measured and ratio.why
    recall = targets["real: recall@3 vs llama-index defaults"]
    assert recall.met is False and "+0.10" in recall.measured and recall.why


def test_no_real_section_gives_no_targets_and_says_so() -> None:
    assert real_targets({}) == []
    assert "Skipped" in "\n".join(real_markdown({}))


def test_the_section_lays_out_quality_strategies_and_the_breakdown() -> None:
    text = "\n".join(real_markdown(real(120.0, 0.8)["real"]))
    assert "llama-index defaults (512/50)" in text and "| 4. s | restart |" in text
    assert "TTFT breakdown" in text and "| default | hits | 4 | 130 |" in text
    assert "2 identical" in text
