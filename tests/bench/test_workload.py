"""The benchmark workload is reproducible and means what it says."""

from collections import Counter

from bench.workload import towns, zipf_stream
from warmup.keys import normalize_query


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
