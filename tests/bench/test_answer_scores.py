"""The judge-free answer scores of the model comparison: a gold fact is a run of four
content words shared with the gold paragraph, never one made of the question's words;
an answer that writes the instruction back is an echo."""

from __future__ import annotations

from bench.answer_scores import content_words, echoes_instruction, gold_runs, holds_gold_fact, stem
from bench.model_records import Answer, summarize
from rag.chat.prompt import INSTRUCTION

GOLD = (
    "Reset the current branch head to the given commit and, depending on the mode, "
    "update the index and the working tree to match."
)


def test_content_words_drop_function_words_and_punctuation() -> None:
    assert content_words("The `git reset` command resets HEAD!") == [
        "reset",
        "command",
        "reset",
        "head",
    ]


def test_a_shared_run_of_four_content_words_is_the_gold_fact() -> None:
    answer = "It will reset the current branch head to the commit you give."
    assert gold_runs(answer, GOLD, "What does reset do?") == ["reset current branch head"]
    assert not holds_gold_fact("It resets the branch.", GOLD, "What does reset do?")


def test_inflections_do_not_hide_the_gold_fact() -> None:
    gold = "The -L option limits annotation to a range of lines."
    answer = "You can use the -L option to limit the annotation to a range of lines."
    assert gold_runs(answer, gold, "What about ranges?") == [
        "l option limit annotation",
        "limit annotation range line",
        "option limit annotation range",
    ]
    assert stem("process") == "process" and stem("rebasing") == "rebas"


def test_a_run_of_the_question_words_alone_is_not_credited() -> None:
    question = "How do I reset the current branch head?"
    assert not holds_gold_fact("Reset the current branch head.", GOLD, question)


def test_an_answer_that_writes_the_instruction_back_echoes() -> None:
    assert echoes_instruction(INSTRUCTION + "\n\nPassages:\n[1] (source: a)")
    assert not echoes_instruction("Use git reset --hard to drop the changes [1].")


def _answer(kind: str, **flags: object) -> Answer:
    values: dict[str, object] = {
        "model": "m", "config": "defaults", "kind": kind, "question": "q", "gold": "g",
        "answer": "a", "finish_reason": "stop", "gold_fact": False, "gold_runs": [],
        "gold_in_prompt": True, "cited": False, "invalid_citations": False,
        "gold_cited": False, "repeats": False, "echoes": False, "answer_tokens": 11,
        "tokens_per_s": 10.0, "ttft_ms": 100.0, "prompt_tokens": 100, "cached_tokens": 0,
    }  # fmt: skip
    return Answer.model_validate(values | flags)


def test_summary_counts_each_question_once_and_times_cold_and_warm_apart() -> None:
    rows = [
        _answer("cold", gold_fact=True, cited=True, echoes=True, ttft_ms=900.0),
        _answer("warm", ttft_ms=100.0, cached_tokens=90),
        _answer("cold", finish_reason="repeat", repeats=True, ttft_ms=1100.0),
        _answer("warm", ttft_ms=120.0, cached_tokens=90),
    ]
    summary = summarize(rows, floors=[50.0, 70.0])
    assert summary.n == 2
    assert (summary.gold_fact, summary.gold_fact_unechoed, summary.cited_unechoed) == (0.5, 0, 0)
    assert (summary.repeats, summary.repeat_stopped, summary.echoes) == (0.5, 0.5, 0.5)
    assert summary.cold_ttft_ms is not None and summary.cold_ttft_ms.p50 == 1000.0
    assert summary.warm_ttft_ms is not None and summary.warm_ttft_ms.mean == 110.0
    assert summary.floor_ttft_ms is not None and summary.floor_ttft_ms.p50 == 60.0
    assert summary.warm_cached_share == 0.9
