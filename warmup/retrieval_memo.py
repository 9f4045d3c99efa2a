"""What each stored query retrieved, until the knowledge base changes.

The hot cycle plans over every stored query that is hot enough, and with document
predictions on that is thousands of them every few minutes. Their contexts only
change when the knowledge base does, so re-retrieving them each cycle spends the
CPU the chats need (the benchmark measured chat retrieval at 75 against 46 ms).
It holds at most ``max_entries`` (least recently used out first): each is a whole
prompt prefix, a few KB.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from rag.prompt import PromptPrefix


@dataclass(frozen=True)
class Retrieved:
    prefix: PromptPrefix
    kth_score: float | None


class RetrievalMemo:
    """Per query key, the prefix its stored embedding retrieved and its k-th score.

    ``generation`` is read before a retrieval starts and handed back to ``put``: a
    write that lands while the retrieval runs (the KB first, then its graph) bumps
    it, so a context read half-way through a write is never kept."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max(1, max_entries)
        self._generation = 0
        self._items: OrderedDict[str, Retrieved] = OrderedDict()

    @property
    def generation(self) -> int:
        return self._generation

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> Retrieved | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def put(self, key: str, generation: int, retrieved: Retrieved) -> None:
        if generation == self._generation:
            self._items[key] = retrieved
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def invalidate(self) -> None:
        """The knowledge base changed: every context may have."""
        self._generation += 1
        self._items.clear()
