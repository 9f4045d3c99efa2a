"""``bench.precision_quality``: its rewordings, and its comparison of two wordings'
prompt prefixes on the service's own read path."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from api.config import Settings
from api.retrieval import build_read_path
from api.stores import build_knowledge
from bench.precision_quality import agreement, reworded
from rag.chat.prompt import PromptBuilder
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn

STASH = "How do I list the stash entries?"
TAG = "How do I create an annotated tag?"
#: Eight one-chunk pages: the two questions' top 3 are not the same three.
TOPICS = {
    "stash": "Git stash saves local changes. Run git stash list to list the stash entries.",
    "tag": "Git tag creates tags. Run git tag -a v1.0 to create an annotated tag.",
    "remote": "Git remote manages the repositories you track, such as origin.",
    "rebase": "Git rebase replays your commits on top of another base commit.",
    "bisect": "Git bisect finds the commit that introduced a bug by binary search.",
    "config": "Git config reads and writes settings such as user.name and user.email.",
    "blame": "Git blame shows which commit last changed each line of a file.",
    "clone": "Git clone copies a repository into a new directory.",
}


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
    settings = Settings(data_dir=tmp_path, seed_sample_kb=False)
    knowledge = build_knowledge(settings, embedder)
    knowledge.open()
    try:
        documents = [DocumentIn(id=topic, text=text) for topic, text in TOPICS.items()]
        anyio.run(knowledge.ingest, documents)
        retriever = build_read_path(settings, knowledge, embedder).retriever
        builder = PromptBuilder(order=settings.passage_order)
        found = agreement(retriever, builder, [(STASH, STASH), (STASH, TAG)])
    finally:
        knowledge.close()
    assert found.pairs == 2
    assert found.same_prefix == found.same_passages == 1
