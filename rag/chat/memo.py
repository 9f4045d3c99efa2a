"""What each question retrieved, until a knowledge-base change touches its context.

A repeated question (same ``normalize_query`` key) is answered from the memo: its
retrieval and its rendered prefix are reused, with no embedding, search or graph
linking (a warm request spent ~37 ms there, inside its TTFT). The warmup layer's
hot cycle reads the same memo for the stored queries it plans over (thousands of
them every few minutes; re-retrieving them spent the CPU the chats need).

A change forgets exactly the items it can have changed, by the one change rule
(``rag.chat.change_rule``) applied to each item.

``generation`` is read before a retrieval starts and handed back to ``put``: a change
that lands while the retrieval runs bumps it, so a context read half-way through a
write is never kept. The memo holds at most ``max_entries`` (least recently used
out): each item is a whole prompt prefix, a few KB.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag.chat.change_rule import ChangeImpact, ChangeRule
from rag.chat.prompt import PromptBuilder, PromptPrefix
from rag.chat.retriever import Retrieval, Retriever
from rag.knowledge.models import ChangeSet


def retrieve_context(
    retriever: Retriever,
    builder: PromptBuilder,
    question: str,
    top_k: int,
    embedding: np.ndarray | None = None,
) -> tuple[Retrieved, float]:
    """A question's retrieval and the prefix the one prompt builder renders from it, as
    chats and warmup both resolve a context; also the milliseconds the prefix took.
    Blocking (embedding, search, and the prefix's token count may ask vLLM): call it in
    a worker thread."""
    retrieval = retriever.retrieve(question, top_k, embedding)
    started = time.perf_counter()
    prefix = builder.prefix(retrieval.passages, retrieval.triples)
    return Retrieved(retrieval, prefix), round((time.perf_counter() - started) * 1000, 2)


@dataclass(frozen=True)
class Retrieved:
    """A question's retrieval and the prefix it renders."""

    retrieval: Retrieval
    prefix: PromptPrefix

    @property
    def doc_ids(self) -> set[str]:
        """Documents its passages and its facts came from."""
        docs = {p.doc_id for p in self.retrieval.passages}
        docs.update(d for f in self.retrieval.facts if (d := getattr(f, "doc_id", None)))
        return docs


class ContextMemo:
    """Per query key, what its question retrieved (see the module doc). Thread-safe:
    chats put from worker threads, the change listener forgets on the event loop."""

    def __init__(self, max_entries: int = 4096, rule: ChangeRule | None = None) -> None:
        """``rule``: the change rule with the graph's facts (None: one without a graph)."""
        self.max_entries = max(1, max_entries)
        self.rule = rule or ChangeRule()
        self._generation = 0
        self._items: OrderedDict[str, Retrieved] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def generation(self) -> int:
        return self._generation

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> Retrieved | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: str, generation: int, retrieved: Retrieved) -> None:
        with self._lock:
            if generation != self._generation:
                return
            self._items[key] = retrieved
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (a change whose extent is unknown)."""
        with self._lock:
            self._generation += 1
            self._items.clear()

    def forget(self, changes: Sequence[ChangeSet]) -> int:
        """Drop the items these changes can have changed; returns how many."""
        impact = self.rule.impact(changes)
        if impact is None:
            return 0
        with self._lock:
            self._generation += 1
            stale = [key for key, item in self._items.items() if _affected(item, impact, self.rule)]
            for key in stale:
                del self._items[key]
            return len(stale)


def _affected(item: Retrieved, impact: ChangeImpact, rule: ChangeRule) -> bool:
    """The change rule, applied to one remembered context."""
    if impact.touches(item.prefix.chunk_ids, item.doc_ids):
        return True
    query = np.asarray(item.retrieval.embedding, dtype=np.float32)
    bars = rule.bars(item.retrieval)
    if impact.chunks_enter(query, _row(bars.chunk))[0]:
        return True
    return bool(impact.facts_enter(query, _row(bars.fact))[0]) or impact.reaches(
        item.retrieval.fact_reach
    )


def _row(bar: float | None) -> np.ndarray:
    """One bar as a one-row array (NaN: None)."""
    return np.array([np.nan if bar is None else bar], np.float32)
