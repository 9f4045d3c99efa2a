"""What each question retrieved, until a knowledge-base change touches its context.

A repeated question (same ``normalize_query`` key) is answered from the memo: its
retrieval and its rendered prefix are reused, with no embedding, search or graph
linking (a warm request spent ~37 ms there, inside its TTFT). The warmup layer's
hot cycle reads the same memo for the stored queries it plans over (thousands of
them every few minutes; re-retrieving them spent the CPU the chats need).

A change forgets exactly the items it can have changed, by the change detector's
rule (``warmup.detector``) applied to each item: a chunk it uses was replaced or
deleted, a new chunk scores above its k-th passage for its question, a fact it
injects came from a changed document, or a new fact of a changed document scores
above its weakest fact (or the selector's threshold while it has free slots), less
the most the selector adds to a fact's score. With path-aware fact selection
(``kg.paths``), where a fact that continues a path from a chosen fact can be chosen
whatever its score, also: a new fact touches an entity the item's facts join
(``Retrieval.fact_reach``). Each test is a superset of what the retrieval could see,
so a kept item is never stale.

``generation`` is read before a retrieval starts and handed back to ``put``: a change
that lands while the retrieval runs bumps it, so a context read half-way through a
write is never kept. The memo holds at most ``max_entries`` (least recently used
out): each item is a whole prompt prefix, a few KB.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rag.chat.prompt import PromptBuilder, PromptPrefix
from rag.chat.retriever import Retrieval, Retriever
from rag.knowledge.models import ChangeSet

#: Stored scores are rounded to 6 places: a chunk that ties the k-th passage (e.g. that
#: very passage) must not count as entering.
SCORE_EPSILON = 1e-5

#: The vectors of the facts the graph now holds for these documents, (n, dim).
FactVectors = Callable[[Sequence[str]], np.ndarray]
#: The keys of the entities the graph's facts of these documents join.
FactEntities = Callable[[Sequence[str]], set[str]]


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


def kth_score(retrieval: Retrieval) -> float | None:
    """Score of the last passage of a top-k: a new chunk must beat it to enter."""
    return retrieval.passages[-1].score if retrieval.passages else None


@dataclass(frozen=True)
class Retrieved:
    """A question's retrieval and the prefix it renders."""

    retrieval: Retrieval
    prefix: PromptPrefix

    @property
    def kth_score(self) -> float | None:
        return kth_score(self.retrieval)

    @property
    def doc_ids(self) -> set[str]:
        """Documents its passages and its facts came from."""
        docs = {p.doc_id for p in self.retrieval.passages}
        docs.update(d for f in self.retrieval.facts if (d := getattr(f, "doc_id", None)))
        return docs


class ContextMemo:
    """Per query key, what its question retrieved (see the module doc). Thread-safe:
    chats put from worker threads, the change listener forgets on the event loop."""

    def __init__(
        self,
        max_entries: int = 4096,
        *,
        fact_vectors: FactVectors | None = None,
        max_facts: int = 3,
        min_fact_score: float = 0.3,
        fact_gain: float = 0.0,
        fact_entities: FactEntities | None = None,
    ) -> None:
        """``fact_vectors`` gives the graph's facts of changed documents (None: no graph;
        then a change's facts cannot enter). ``max_facts`` and ``min_fact_score`` are the
        fact selector's slots and threshold; ``fact_gain`` is the most its score gives a
        fact over its cosine to the question (``SubgraphSelector.max_gain``).
        ``fact_entities`` gives the entity keys of the changed documents' facts, for a
        path-aware selector (None: the selector ranks facts by score alone)."""
        self.max_entries = max(1, max_entries)
        self.fact_vectors = fact_vectors
        self.max_facts = max_facts
        self.min_fact_score = min_fact_score
        self.fact_gain = fact_gain
        self.fact_entities = fact_entities
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
        changes = [c for c in changes if c.changed]
        if not changes:
            return 0
        removed = {c for ch in changes for c in ch.removed_chunk_ids}
        # Added documents too: an item retrieved between a write's commit and this call
        # may already hold the new document's chunks with the graph from before it.
        touched = {d for ch in changes for d in (*ch.added, *ch.updated, *ch.deleted)}
        new_chunks = _matrix([c.embedding for ch in changes for c in ch.added_chunks])
        rewritten = sorted({d for ch in changes for d in (*ch.added, *ch.updated)})
        new_facts = _matrix([])
        if self.fact_vectors is not None and rewritten:
            new_facts = np.asarray(self.fact_vectors(rewritten), dtype=np.float32)
        entities: set[str] = set()
        if self.fact_entities is not None and rewritten:
            entities = self.fact_entities(rewritten)
        with self._lock:
            self._generation += 1
            stale = [
                key
                for key, item in self._items.items()
                if self._affected(item, removed, touched, new_chunks, new_facts)
                or not item.retrieval.fact_reach.isdisjoint(entities)
            ]
            for key in stale:
                del self._items[key]
            return len(stale)

    def _affected(
        self,
        item: Retrieved,
        removed: set[str],
        touched: set[str],
        new_chunks: np.ndarray,
        new_facts: np.ndarray,
    ) -> bool:
        if not removed.isdisjoint(item.prefix.chunk_ids) or not touched.isdisjoint(item.doc_ids):
            return True
        query = np.asarray(item.retrieval.embedding, dtype=np.float32)
        kth = item.kth_score
        if new_chunks.size and (kth is None or _best(new_chunks, query) > kth + SCORE_EPSILON):
            return True
        if not new_facts.size:
            return False
        facts = item.retrieval.facts
        weakest = min((f.score for f in facts), default=self.min_fact_score)
        bar = weakest if len(facts) >= self.max_facts else min(weakest, self.min_fact_score)
        return _best(new_facts, query) + self.fact_gain >= bar - SCORE_EPSILON


def _matrix(rows: Sequence[Sequence[float]]) -> np.ndarray:
    rows = [r for r in rows if len(r)]
    return np.asarray(rows, dtype=np.float32) if rows else np.zeros((0, 0), np.float32)


def _best(matrix: np.ndarray, query: np.ndarray) -> float:
    return float((matrix @ query).max()) if matrix.size and query.size else -np.inf
