"""Context resolution: the exact prompt prefix a chat for a question would send now.

Retrieval runs in a worker thread (embedding and Qdrant local mode compute there)
with the query's stored embedding, so nothing is embedded twice. What a stored query
retrieved is remembered (``rag.chat.memo``, the memo chats read too) until a change
touches its context.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import numpy as np

from rag.chat.change_rule import ContextBars
from rag.chat.memo import ContextMemo, Retrieved, retrieve_context
from rag.chat.prompt import PromptBuilder, PromptPrefix
from rag.chat.retriever import Retrieval, Retriever
from warmup.registry import Registry


class ContextResolver:
    def __init__(
        self,
        retriever: Retriever,
        builder: PromptBuilder,
        registry: Registry,
        *,
        top_k: int,
        memo: ContextMemo,
    ) -> None:
        self.retriever = retriever
        self.builder = builder
        self.registry = registry
        self.top_k = top_k
        self.memo = memo

    @property
    def generation(self) -> int:
        """Bumped by every knowledge-base change: a context resolved under an older
        generation may be stale."""
        return self.memo.generation

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
        found, _ = await anyio.to_thread.run_sync(
            retrieve_context, self.retriever, self.builder, record.text, self.top_k, embedding
        )
        self.memo.put(key, generation, found)
        return found

    def bars(self, retrieval: Retrieval) -> ContextBars:
        """The bars this retrieved context sets for change detection (kept per query)."""
        return self.memo.rule.bars(retrieval)

    async def prefix_for(self, question: str) -> PromptPrefix:
        """The prefix for a question that is not stored (it is embedded now)."""
        found, _ = await anyio.to_thread.run_sync(
            retrieve_context, self.retriever, self.builder, question, self.top_k
        )
        return found.prefix

    async def embed(self, questions: Sequence[str]) -> np.ndarray:
        """(n, dim) vectors, as a chat's retrieval would embed these questions."""
        return await anyio.to_thread.run_sync(self.retriever.embed_questions, list(questions))
