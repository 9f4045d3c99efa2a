"""A knowledge base of eight one-chunk pages on the service's own read path, for the
benchmarks that compare what two retrievals build."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio

from api.config import Settings
from api.retrieval import build_read_path
from api.stores import build_knowledge
from rag.chat.prompt import PromptBuilder
from rag.chat.retriever import Retriever
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
DOCUMENTS = [DocumentIn(id=topic, text=text) for topic, text in TOPICS.items()]


@contextmanager
def topics_read_path(folder: Path, embedder: Embedder) -> Iterator[tuple[Retriever, PromptBuilder]]:
    """The eight pages ingested into the default stores in ``folder``: the chat's
    retriever over them and its prompt builder."""
    settings = Settings(data_dir=folder, seed_sample_kb=False)
    knowledge = build_knowledge(settings, embedder)
    knowledge.open()
    try:
        anyio.run(knowledge.ingest, DOCUMENTS)
        retriever = build_read_path(settings, knowledge, embedder).retriever
        yield retriever, PromptBuilder(order=settings.passage_order)
    finally:
        knowledge.close()
