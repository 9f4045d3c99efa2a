"""``bench.question_runtime``: its comparison of one question's two vectors on the
service's own read path, and its measure on a small knowledge base."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.question_runtime import TOLERANCE, compare, measure
from rag.knowledge.embedding import Embedder
from tests.bench.topics import DOCUMENTS, STASH, TAG, topics_read_path


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
    """The service's embedder in the default precision, the reference torch: every
    question retrieves the same, each runtime timed once a question."""
    questions = [STASH, TAG, "How can I list the stash entries?"]
    report = measure(DOCUMENTS, questions, tmp_path)
    assert report.questions == len(questions) and report.chunks == len(DOCUMENTS)
    assert report.max_abs_difference < TOLERANCE and report.least_cosine > 0.9999
    assert report.agreement.same_prefix == report.agreement.pairs == len(questions)
    assert min(report.floor.p50_ms, report.onnx.p50_ms, report.torch.p50_ms) > 0
