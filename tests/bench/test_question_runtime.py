"""``bench.question_runtime``: its comparison of one question's two vectors on the
service's own read path, and its measure on a small knowledge base."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.question_runtime import TOLERANCE, compare, failures, measure
from bench.retrieval_quality import GoldQuestion
from rag.knowledge.embedding import Embedder
from tests.bench.topics import DOCUMENTS, STASH, TAG, TOPICS, topics_read_path


def test_a_question_agrees_only_where_both_vectors_build_one_prefix(
    tmp_path: Path, embedder: Embedder
) -> None:
    with topics_read_path(tmp_path, embedder) as (retriever, builder):
        stash, tag = embedder.embed_questions([STASH, TAG])
        found = compare(
            retriever, builder, [STASH, STASH], np.stack([stash, stash]), np.stack([stash, tag])
        )
    assert found.pairs == 2
    assert found.same_prefix == found.same_passages == 1


def test_the_runtimes_build_the_same_prompts_on_a_small_knowledge_base(tmp_path: Path) -> None:
    """The service's embedder in the default precisions, float32's questions and the
    reference torch: every question and rewording retrieves the same, each runtime timed
    once a question; "How do I" reworded as "How can I"."""
    golds = [
        GoldQuestion(STASH, "stash", TOPICS["stash"]),
        GoldQuestion(TAG, "tag", TOPICS["tag"]),
    ]
    report = measure(DOCUMENTS, golds, tmp_path)
    assert report.questions == 4 and report.chunks == len(DOCUMENTS)
    assert report.max_abs_difference < TOLERANCE and report.least_cosine > 0.999
    assert report.agreement.same_prefix == report.agreement.pairs == 4
    assert set(report.runtimes) == {"service", "float32", "torch"}
    for result in report.runtimes.values():
        assert result.quality.recall_at_1 == 1.0 and result.timing.p50_ms > 0
        assert result.rewordings.pairs == 2
    assert report.floor.p50_ms > 0 and failures(report) == []


def test_a_run_fails_on_a_runtime_apart_or_a_recall_lost(tmp_path: Path) -> None:
    golds = [GoldQuestion(STASH, "stash", TOPICS["stash"])]
    report = measure(DOCUMENTS, golds, tmp_path)
    apart = report.model_copy(update={"max_abs_difference": 2 * TOLERANCE})
    assert [f.split(" differ")[0] for f in failures(apart)] == [
        "float32's and torch's question vectors"
    ]
    service = report.runtimes["service"]
    lost = service.model_copy(
        update={"quality": service.quality.model_copy(update={"recall_at_3": 0.98})}
    )
    lower = report.model_copy(update={"runtimes": report.runtimes | {"service": lost}})
    assert len(failures(lower)) == 1 and "below float32's 1.0" in failures(lower)[0]
