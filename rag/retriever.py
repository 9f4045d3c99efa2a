"""Retrieval: question → embedding → top-k passages → knowledge-graph triples."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from rag.knowledge_base import KnowledgeBase
from rag.models import Passage


@dataclass(frozen=True)
class ScoredFact:
    """A knowledge-graph triple chosen for a prompt, with its relevance score."""

    subject: str
    predicate: str
    object: str
    score: float

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.subject, self.predicate, self.object)


class FactSource(Protocol):
    """Picks the triples to inject for a question (the kg/ layer implements it)."""

    def facts_for(
        self, question: str, question_embedding: np.ndarray, passages: Sequence[Passage]
    ) -> list[ScoredFact]: ...


@dataclass(frozen=True)
class Retrieval:
    """Everything a prompt is built from, plus the embedding that found it."""

    question: str
    embedding: np.ndarray
    passages: list[Passage]
    facts: list[ScoredFact] = field(default_factory=list)
    elapsed_ms: float = 0.0

    @property
    def triples(self) -> list[tuple[str, str, str]]:
        return [f.as_tuple() for f in self.facts]


class Retriever:
    """Shared by chat and warmup, so both see the same context for a question."""

    def __init__(self, kb: KnowledgeBase, facts: FactSource | None = None) -> None:
        self.kb = kb
        self.facts = facts

    def retrieve(
        self, question: str, top_k: int = 3, embedding: np.ndarray | None = None
    ) -> Retrieval:
        """Blocking (embedding and Qdrant local mode compute in this thread).

        Pass a stored ``embedding`` to skip re-embedding the question.
        """
        started = time.perf_counter()
        if embedding is None:
            embedding = self.kb.embedder.embed_query(question)
        passages = self.kb.retrieve(embedding, top_k)
        facts = self.facts.facts_for(question, embedding, passages) if self.facts else []
        elapsed = (time.perf_counter() - started) * 1000
        return Retrieval(question, embedding, passages, facts, elapsed)
