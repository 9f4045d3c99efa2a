"""``bench.precision_quality``: its rewordings, and its comparison of two wordings'
prompt prefixes on the service's own read path."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.precision_quality import agreement, reworded
from rag.knowledge.embedding import Embedder
from tests.bench.topics import STASH, TAG, topics_read_path


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (STASH, "How can I list the stash entries?"),
        ("What does git commit do?", "What is git commit for?"),
        ("Which options does git rm accept?", "What options does git rm take?"),
        ("How can git merge be configured?", "How do I configure git merge?"),
        ("What should I know about hooks?", "What do I need to know about hooks?"),
        ("What is a branch?", "What's a branch?"),
        ("How does the merge work?", None),
    ],
)
def test_each_question_form_is_reworded_by_its_rule(question: str, expected: str | None) -> None:
    assert reworded(question) == expected


def test_pairs_agree_only_where_both_wordings_build_one_prefix(
    tmp_path: Path, embedder: Embedder
) -> None:
    with topics_read_path(tmp_path, embedder) as (retriever, builder):
        found = agreement(retriever, builder, [(STASH, STASH), (STASH, TAG)])
    assert found.pairs == 2
    assert found.same_prefix == found.same_passages == 1
