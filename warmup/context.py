"""Context resolution: the exact prompt prefix a chat for a question would send now.

Retrieval runs in a worker thread (embedding and Qdrant local mode compute there)
with the query's stored embedding, so nothing is embedded twice. What a stored query
retrieved is remembered (``rag.context_memo``, the memo chats read too) until a change
touches its context.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import numpy as np

from rag.context_memo import ContextMemo, Retrieved
from rag.models import ChangeSet
from rag.prompt import PromptBuilder, PromptPrefix
from rag.retriever import Retriever
from warmup.registry import Registry


class ContextResolver:
    def __init__(
        self,
        retriever: Retriever,
        builder: PromptBuilder,
        registry: Registry,
        *,
        top_k: int,
        memo: ContextMemo | None = None,
    ) -> None:
        self.retriever = retriever
        self.builder = builder
        self.registry = registry
        self.top_k = top_k
        self.memo = memo if memo is not None else ContextMemo()

    @property
    def generation(self) -> int:
        """Bumped by every knowledge-base change: a context resolved under an older
        generation may be stale."""
        return self.memo.generation

    def forget(self, change: ChangeSet) -> None:
        """The knowledge base changed: forget the contexts the change can have moved."""
        self.memo.forget([change])

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
        found = await anyio.to_thread.run_sync(self._retrieve, record.text, embedding)
        self.memo.put(key, generation, found)
        return found

    def _retrieve(self, question: str, embedding: np.ndarray | None = None) -> Retrieved:
        """Retrieval and prefix, in a worker thread (the prefix may ask vLLM for its
        token count, to align it to whole KV blocks)."""
        retrieval = self.retriever.retrieve(question, self.top_k, embedding)
        return Retrieved(retrieval, self.builder.prefix(retrieval.passages, retrieval.triples))

    async def prefix_for(self, question: str) -> PromptPrefix:
        """The prefix for a question that is not stored (it is embedded now)."""
        return (await anyio.to_thread.run_sync(self._retrieve, question)).prefix

    async def embed(self, questions: Sequence[str]) -> np.ndarray:
        """(n, dim) vectors, as a chat's retrieval would embed these questions."""
        return await anyio.to_thread.run_sync(self.retriever.embed_questions, list(questions))
