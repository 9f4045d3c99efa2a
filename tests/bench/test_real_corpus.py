"""The real corpus (Git's documentation) is parsed, questioned and streamed as the
benchmark expects, and the retrieval-quality metrics count what they claim to.

Cheap: AsciiDoc fixtures in strings, no embedding model (the llama-index baseline
runs on ``MockEmbedding``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from llama_index.core import MockEmbedding

from bench.asciidoc import parse_sections, question_for
from bench.change_scenario import changed_towns
from bench.real_corpus import (
    GitSection,
    RealWorkload,
    sections_from_source,
    unique_questions,
)
from bench.real_records import RealSpec
from bench.retrieval_quality import (
    GoldQuestion,
    evaluate_llamaindex_defaults,
    evaluate_service,
    gold_rank,
    gold_text_reaches,
    score,
)
from bench.workload import AnyWorkload, Topic, Workload, WorkloadSpec, towns
from rag.chat.query import normalize_query
from rag.knowledge.input_checks import doc_id_problem

FILLER = " ".join(f"word{i}" for i in range(60))

MANUAL = f"""= Git User Manual

[[branches]]
== Repositories and Branches

[[creating-branch]]
=== Creating a new branch

You make a branch with linkgit:git-branch[1], see <<def_branch,branch>>. {FILLER}

------------------------------------------------
$ git branch new
------------------------------------------------

Understanding commits
~~~~~~~~~~~~~~~~~~~~~

include::shared.txt[]
Each commit has a `parent`. {FILLER}

+
Examples
^^^^^^^^

An example section long enough to keep. {FILLER}

Tiny
~~~~

Too short to keep.
"""

MAN_PAGE = f"""git-commit(1)
=============

NAME
----
git-commit - Record changes to the repository

DESCRIPTION
-----------
Create a new commit containing the current contents of the index. {FILLER}

OPTIONS
-------
-a::
--all::
	Stage modified files. {FILLER}
"""


def test_both_heading_styles_become_sections_with_clean_text() -> None:
    sections = parse_sections(MANUAL)
    assert [s.path[1:] for s in sections] == [
        ("Repositories and Branches",),
        ("Repositories and Branches", "Creating a new branch"),
        ("Repositories and Branches", "Understanding commits"),
        ("Repositories and Branches", "Understanding commits", "Examples"),
        ("Repositories and Branches", "Tiny"),
    ]
    creating = sections[1]
    assert creating.blocks[0].kind == "prose"
    assert creating.blocks[0].text.startswith("You make a branch with git-branch(1), see branch.")
    assert creating.blocks[1] == type(creating.blocks[1])("code", "$ git branch new")
    understanding = sections[2].blocks[0].text
    assert "include::" not in understanding and "Each commit has a parent." in understanding


def test_questions_follow_the_headings() -> None:
    assert question_for("Creating a new branch") == "How do I create a new branch?"
    assert question_for("How to merge") == "How do I merge?"
    assert (
        question_for("Understanding commits") == "What should I know about understanding commits?"
    )
    assert question_for("DESCRIPTION", "git commit") == "What does git commit do?"
    assert question_for("INTERACTIVE MODE", "git rebase") == (
        "What should I know about interactive mode in git rebase?"
    )
    for heading in ("Examples", "SEE ALSO", "NOTES", "SYNOPSIS", "GIT", "Author"):
        assert question_for(heading) is None


def test_sections_are_documents_with_valid_ids_questions_and_gold_text() -> None:
    manual = sections_from_source(MANUAL, "user-manual.txt")
    man = sections_from_source(MAN_PAGE, "git-commit.txt")
    assert [s.id for s in manual] == [
        "git-doc/user-manual/creating-a-new-branch",
        "git-doc/user-manual/understanding-commits",
        "git-doc/user-manual/examples",
    ]  # the chapter's empty introduction and "Tiny" are too short
    assert [s.id for s in man] == ["git-doc/git-commit/description", "git-doc/git-commit/options"]
    assert all(doc_id_problem(s.id) is None for s in manual + man)
    assert [s.question for s in manual] == [
        "How do I create a new branch?",
        "What should I know about understanding commits?",
        None,
    ]
    assert man[0].question == "What does git commit do?"
    doc = manual[0].documents()[0]
    assert doc["id"] == manual[0].id
    assert str(doc["text"]).startswith(
        "Git User Manual > Repositories and Branches > Creating a new branch\n\nYou make"
    )
    assert doc["metadata"] == {"title": "Creating a new branch", "source": "user-manual.txt"}
    gold = manual[0].gold()
    assert gold is not None and gold.gold == manual[0].id
    assert len(gold.gold_text.split()) == 60 and gold_text_reaches(
        gold.gold_text, [str(doc["text"])]
    )
    revised = manual[0].documents(1)[0]
    assert revised["id"] == doc["id"] and revised["text"] != doc["text"]
    assert "edition 2" in str(revised["text"])


def test_a_repeated_question_keeps_one_gold() -> None:
    twice = sections_from_source(MANUAL, "user-manual.txt") + sections_from_source(
        MANUAL.replace("= Git User Manual", "= Other"), "gittutorial.txt"
    )
    kept = unique_questions(twice)
    keys = [normalize_query(s.question) for s in kept if s.question]
    assert len(keys) == len(set(keys)) == 2


def _sections(n: int) -> list[GitSection]:
    """n distinct sections, every other one with a question."""
    return [
        GitSection(
            id=f"git-doc/fixture/s{i}",
            path=("Fixture", f"Topic {i}"),
            source="fixture.txt",
            body=f"Body of topic {i}. {FILLER}",
            gold_text=f"Body of topic {i}.",
            question=f"How do I use topic {i}?" if i % 2 == 0 else None,
            words=50,
        )
        for i in range(n)
    ]


SMALL = RealSpec(sections=20, question_sections=6, steady_requests=60, restart_requests=20)


def test_workload_streams_are_deterministic_paraphrases_of_its_questions() -> None:
    first = RealWorkload(SMALL, _sections(30))
    second = RealWorkload(SMALL, _sections(30))
    assert first.steady == second.steady and first.restart == second.restart
    assert len(first.steady) == 60 and len(first.restart) == 20
    assert len(first.towns) == 20 and len(first.question_towns) == 6
    keys = {normalize_query(q) for q in first.questions}
    stream = first.steady + first.restart
    assert {normalize_query(q) for q in stream} <= keys
    assert len(set(stream)) > len({normalize_query(q) for q in stream})  # spelled differently
    assert [d["id"] for d in first.documents()] == [t.id for t in first.towns]
    assert {g.gold for g in first.gold_questions(only_asked=True)} == {
        t.id for t in first.question_towns
    }
    other = RealWorkload(RealSpec(**{**SMALL.__dict__, "seed": 8}), _sections(30))
    assert other.steady != first.steady
    with pytest.raises(ValueError):
        RealWorkload(RealSpec(sections=20, question_sections=15), _sections(30))


def test_real_workload_serves_the_scenarios_as_towns_do() -> None:
    real: AnyWorkload = RealWorkload(SMALL, _sections(30))
    synthetic: AnyWorkload = Workload(WorkloadSpec.quick())
    topic: Topic = towns(1)[0]
    assert topic.questions()
    for workload in (real, synthetic):
        plan = changed_towns(workload, (1, 2))
        ranked = workload.towns_by_traffic()
        assert plan[1] == [ranked[0]] and plan[2] == list(ranked[1:3])
        for chosen in plan[2]:
            doc = chosen.documents(2)[0]
            assert doc["id"] == chosen.documents()[0]["id"]
            assert doc["text"] != chosen.documents()[0]["text"]
            assert workload.asked_question(chosen) in chosen.questions()
    by_traffic = real.towns_by_traffic()
    counts = [
        sum(
            normalize_query(q) == normalize_query(t.questions()[0])
            for q in real.steady + real.restart
        )
        for t in by_traffic
    ]
    assert counts == sorted(counts, reverse=True)


QUESTIONS = [
    GoldQuestion("q1", "a", "alpha text"),
    GoldQuestion("q2", "b", "beta text"),
    GoldQuestion("q3", "c", "gamma text"),
    GoldQuestion("q4", "d", "delta text"),
]


def test_rank_metrics_count_distinct_documents() -> None:
    assert gold_rank(["x", "x", "a"], "a") == 2  # chunks of one document count once
    assert gold_rank(["x"] * 9 + ["y", "a"], "a") is None  # past the 10th hit
    rankings = [
        ["a", "x"],  # rank 1
        ["x", "x", "y", "b"],  # rank 3
        ["x", "y", "z", "w", "c"],  # rank 5
        ["x", "y"],  # missed
    ]
    prompts = [["the alpha  text\nhere"], ["nothing"], ["gamma text"], []]
    quality = score(QUESTIONS, rankings, prompts)
    assert (quality.recall_at_1, quality.recall_at_3, quality.recall_at_10) == (0.25, 0.5, 0.75)
    assert quality.mrr == pytest.approx((1 + 1 / 3 + 1 / 5) / 4)
    assert quality.gold_text_in_prompt == 0.5
    assert [r.rank for r in quality.results] == [1, 3, 5, None]
    worse = score(QUESTIONS, [["x"], ["b"], ["c"], ["x"]], prompts)
    assert quality.fixed_and_broken(worse) == (["q1"], ["q3"])


@dataclass
class _Passage:
    doc_id: str
    text: str
    window: str | None = None


@dataclass
class _Found:
    passages: list[_Passage]


class _Retriever:
    def __init__(self, hits: dict[str, list[_Passage]]) -> None:
        self.hits = hits
        self.top_k: list[int] = []

    def retrieve(self, question: str, top_k: int = 3) -> _Found:
        self.top_k.append(top_k)
        return _Found(self.hits[question][:top_k])


def test_service_evaluation_reads_windows_of_the_first_three_passages() -> None:
    hits = {
        "q1": [_Passage("x", "no"), _Passage("a", "cut", window="the alpha text, widened")],
        "q2": [_Passage("x", "no")] * 3 + [_Passage("b", "beta text")],
    }
    retriever = _Retriever(hits)
    quality = evaluate_service(retriever, QUESTIONS[:2])
    assert retriever.top_k == [10, 3, 10, 3]  # ranks from a top 10, the prompt a chat's
    assert [r.rank for r in quality.results] == [2, 2]
    assert [r.gold_text_in_prompt for r in quality.results] == [True, False]  # 4th is past 3


def test_llamaindex_baseline_runs_on_a_mock_embedding() -> None:
    docs = [
        {"id": f"doc-{i}", "text": f"Document {i}: {text}", "metadata": {"source": "t"}}
        for i, text in enumerate(["alpha text", "beta text", "gamma text"])
    ]
    questions = [GoldQuestion("Which is alpha?", "doc-0", "alpha text")]
    quality = evaluate_llamaindex_defaults(docs, questions, MockEmbedding(embed_dim=8))
    assert quality.n == 1 and quality.results[0].rank is not None  # all three are ranked
    assert quality.seconds > 0
