"""Context resolution: the exact prompt prefix a chat for a question would send now.

Retrieval runs in a worker thread (embedding and Qdrant local mode compute there)
with the query's stored embedding, so nothing is embedded twice. What a stored query
retrieved is remembered (``RetrievalMemo``) until the knowledge base changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import numpy as np

from rag.prompt import PromptBuilder, PromptPrefix
from rag.retriever import Retrieval, Retriever
from warmup.registry import Registry
from warmup.retrieval_memo import RetrievalMemo, Retrieved


def kth_score(retrieval: Retrieval) -> float | None:
    """Score of the last passage of a top-k: a new chunk must beat it to enter."""
    return retrieval.passages[-1].score if retrieval.passages else None


class ContextResolver:
    def __init__(
        self,
        retriever: Retriever,
        builder: PromptBuilder,
        registry: Registry,
        *,
        top_k: int,
        memo: RetrievalMemo | None = None,
    ) -> None:
        self.retriever = retriever
        self.builder = builder
        self.registry = registry
        self.top_k = top_k
        self.memo = memo or RetrievalMemo()

    @property
    def generation(self) -> int:
        """Bumped by every knowledge-base change: a context resolved under an older
        generation may be stale."""
        return self.memo.generation

    def invalidate(self) -> None:
        """The knowledge base changed: any context may have."""
        self.memo.invalidate()

    async def resolve(self, key: str, *, fresh: bool = False) -> Retrieved | None:
        """The prefix a chat for stored query ``key`` would send now (None: no such query).

        Remembered until the knowledge base changes; ``fresh`` retrieves anyway
        (detection and the scheduled re-check must see the stores as they are)."""
        if not fresh and (memo := self.memo.get(key)) is not None:
            return memo
        record = self.registry.query(key)
        embedding = self.registry.embedding(key)
        if record is None or embedding is None:
            return None
        generation = self.memo.generation
        retrieval = await anyio.to_thread.run_sync(
            self.retriever.retrieve, record.text, self.top_k, embedding
        )
        found = Retrieved(
            self.builder.prefix(retrieval.passages, retrieval.triples), kth_score(retrieval)
        )
        self.memo.put(key, generation, found)
        return found

    async def prefix_for(self, question: str) -> PromptPrefix:
        """The prefix for a question that is not stored (it is embedded now)."""
        retrieval = await anyio.to_thread.run_sync(self.retriever.retrieve, question, self.top_k)
        return self.builder.prefix(retrieval.passages, retrieval.triples)

    async def embed(self, questions: Sequence[str]) -> np.ndarray:
        """(n, dim) vectors, as a chat's retrieval would embed these questions."""
        return await anyio.to_thread.run_sync(self.retriever.embed_questions, list(questions))
