"""The benchmark workload is reproducible and means what it says."""

from collections import Counter

import pytest

from bench.workload import Workload, WorkloadSpec, towns, unrelated_document, zipf_stream
from rag.chat.query import normalize_query


def test_corpus_is_seeded_and_unique() -> None:
    assert towns(20) == towns(20)
    assert towns(20) != towns(20, seed=8)
    names = [t.name for t in towns(200)]
    assert len(set(names)) == 200
    docs = [d for t in towns(5) for d in t.documents()]
    assert len({d["id"] for d in docs}) == 15


def test_paraphrases_normalize_to_their_question() -> None:
    questions = [q for t in towns(10) for q in t.questions()]
    keys = {normalize_query(q) for q in questions}
    stream = zipf_stream(questions, 500)
    assert stream == zipf_stream(questions, 500)
    assert {normalize_query(q) for q in stream} <= keys
    assert len(set(stream)) > len({normalize_query(q) for q in stream})  # spelled differently


def test_stream_is_skewed() -> None:
    questions = [f"question {i}?" for i in range(100)]
    counts = Counter(normalize_query(q) for q in zipf_stream(questions, 2000, s=1.1))
    top = counts.most_common()
    assert top[0][1] > 10 * top[len(top) // 2][1]


def test_full_workload_has_the_promised_size() -> None:
    workload = Workload(WorkloadSpec.full())
    assert len(workload.documents()) >= 2000  # one chunk each (checked by the suite's ingest)
    assert len({normalize_query(q) for q in workload.questions}) >= 300
    assert len(workload.steady) == WorkloadSpec.full().steady_requests
    assert len(workload.restart) == WorkloadSpec.full().restart_requests


def test_workload_is_reproducible() -> None:
    first, second = Workload(WorkloadSpec.quick()), Workload(WorkloadSpec.quick())
    assert first.documents() == second.documents()
    assert first.steady == second.steady and first.restart == second.restart
    other = Workload(WorkloadSpec(towns=80, question_towns=40, seed=8))
    assert other.steady != first.steady


def test_questions_come_from_the_question_towns_only() -> None:
    workload = Workload(WorkloadSpec.quick())
    keys = {normalize_query(q) for q in workload.questions}
    assert {normalize_query(q) for q in workload.steady + workload.restart} <= keys
    asked = {t.name for t in workload.question_towns}
    assert all(t.name in asked for t in workload.towns_by_traffic())


def test_towns_by_traffic_puts_the_most_asked_first() -> None:
    workload = Workload(WorkloadSpec.quick())
    by_town = {normalize_query(q): t.name for t in workload.towns for q in t.questions()}
    counts = Counter(by_town[normalize_query(q)] for q in workload.steady + workload.restart)
    ranked = [counts[t.name] for t in workload.towns_by_traffic()]
    assert ranked == sorted(ranked, reverse=True)
    top = workload.towns_by_traffic()[0]
    assert normalize_query(workload.asked_question(top)) in {
        normalize_query(q) for q in workload.steady + workload.restart
    }


def test_a_revision_changes_only_the_history_document() -> None:
    town = towns(1)[0]
    before, after = town.documents(), town.documents(revision=1)
    assert [d["id"] for d in before] == [d["id"] for d in after]
    assert before[0]["text"] != after[0]["text"]
    assert before[1:] == after[1:]
    assert town.documents(revision=2)[0]["text"] != after[0]["text"]


def test_unrelated_document_mentions_no_town() -> None:
    text = str(unrelated_document()["text"])
    assert not any(t.name in text for t in Workload(WorkloadSpec.full()).towns)


def test_bad_spec_is_refused() -> None:
    with pytest.raises(ValueError, match="question_towns"):
        Workload(WorkloadSpec(towns=10, question_towns=20))


def test_the_hot_set_stream_mixes_seeded_questions_into_cold_ones_about_other_towns() -> None:
    from dataclasses import replace as _replace

    from bench.pressure import HOT_SHARE, HOT_TOWNS, hot_stream, pressure_workload
    from bench.workload import WorkloadSpec

    workload = pressure_workload(_replace(WorkloadSpec.quick()), quick=True)
    hot, stream = hot_stream(workload, 400)
    assert len(set(hot)) == HOT_TOWNS
    share = sum(q in hot for q in stream) / len(stream)
    assert abs(share - HOT_SHARE) < 0.07
    hot_towns = {t.slug for t in workload.question_towns if t.questions()[0] in hot}
    cold = [q for q in stream if q not in hot]
    assert not any(q in t.questions() for t in workload.question_towns if t.slug in hot_towns
                   for q in cold)  # fmt: skip
