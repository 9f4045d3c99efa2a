"""Where each warm entry's KV blocks are: one ``ResidencyIndex`` per vLLM server.

``ResidencyTracker`` names an entry's warmed full blocks as vLLM does (the prefix's
token ids from vLLM's ``/tokenize``, chained into vLLM's block hashes) and files
them in the index of the replica that warmed it; each index is fed by that
replica's own KV-event subscriber (the composition root wires one per server).
Where a server publishes no events, it has no index, and warmup falls back to what
chats' ``cached_tokens`` say.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from pydantic import BaseModel, Field

from rag.llm.block_hashes import BlockHasher
from rag.llm.client import LLMError, Message
from rag.llm.placement import Located
from warmup.residency import EntryResidency, Residence, ResidencyIndex

log = logging.getLogger(__name__)

#: The index of a single server (no replica name).
SINGLE = ""

Tokenize = Callable[[Sequence[Message]], Awaitable[list[int] | None]]


class ResidencySummary(BaseModel):
    """What the events say of the warm entries (``GET /admin/warmup``)."""

    source: str = Field(
        description="kv_events: vLLM's KV-cache events; cached_tokens: inferred from chats"
    )
    entries: dict[Residence, int] = Field(default_factory=dict)
    resident_blocks: int = 0
    stored_blocks: int = Field(0, description="Blocks vLLM stored since start (the LRU clock).")
    removed_blocks: int = 0
    unknown_periods: int = Field(0, description="Times events were lost: state unknown.")


class ResidencyTracker:
    def __init__(self, tokenize: Tokenize, hasher: Callable[[int], BlockHasher]) -> None:
        """``hasher(block_size)``: vLLM's hash chain for that block size."""
        self._tokenize = tokenize
        self._hasher_for = hasher
        self._hashers: dict[int, BlockHasher] = {}
        self.indexes: dict[str, ResidencyIndex] = {}

    def warm_up(self, block_size: int = 16) -> None:
        """Build a hasher once, so the first warm prefix does not load vLLM's hashing
        code on the event loop (blocking: run it in a thread)."""
        self._hasher(block_size)

    def attach(self, replica: str | None, index: ResidencyIndex) -> None:
        self.indexes[replica or SINGLE] = index

    def configure(self, block_size: int, capacity_blocks: int) -> None:
        """vLLM's block size and block count, once it answered."""
        for index in self.indexes.values():
            index.configure(block_size, capacity_blocks)

    @property
    def enabled(self) -> bool:
        return bool(self.indexes)

    def index(self, replica: str | None) -> ResidencyIndex | None:
        return self.indexes.get(replica or SINGLE) or (
            self.indexes.get(SINGLE) if len(self.indexes) == 1 else None
        )

    async def track(
        self,
        fingerprint: str,
        messages: Sequence[Message],
        warmed_tokens: int,
        replica: str | None,
    ) -> EntryResidency | None:
        """Name the blocks ``fingerprint`` just warmed on ``replica``; None where that
        server has no events or its tokens could not be had (then it stays untracked
        and chats' ``cached_tokens`` judge it)."""
        index = self.index(replica)
        if index is None:
            return None
        try:
            ids = await self._tokenize(messages)
        except LLMError as exc:
            log.warning("residency: could not tokenize a warm prefix: %s", exc)
            ids = None
        if ids is None:
            index.untrack(fingerprint)
            return None
        hashes = self._hasher(index.block_size).hashes(ids[:warmed_tokens])
        index.track(fingerprint, hashes)
        for other in self.indexes.values():
            if other is not index:
                other.untrack(fingerprint)
        return index.state(fingerprint)

    def tracked(self) -> list[str]:
        return sorted({fp for index in self.indexes.values() for fp in index.tracked()})

    def holds(self, fingerprint: str, replica: str | None) -> bool:
        """``fingerprint``'s blocks are filed in ``replica``'s index."""
        index = self.index(replica)
        return index is not None and index.state(fingerprint) is not None

    def used(self, fingerprint: str) -> None:
        for index in self.indexes.values():
            index.used(fingerprint)

    def untrack(self, fingerprint: str) -> None:
        for index in self.indexes.values():
            index.untrack(fingerprint)

    def keep_only(self, fingerprints: Sequence[str]) -> None:
        for index in self.indexes.values():
            index.keep_only(fingerprints)

    def state(self, fingerprint: str) -> EntryResidency | None:
        for index in self.indexes.values():
            if (residency := index.state(fingerprint)) is not None:
                return residency
        return None

    def locate(self, fingerprint: str) -> Located | None:
        """Which replica's index files ``fingerprint``, and whether its leading block is
        there (the router's ``ResidencyLookup``); None where none tracks it."""
        for name, index in self.indexes.items():
            if (residency := index.state(fingerprint)) is not None:
                return Located(name, residency.state is not Residence.NONE)
        return None

    def lost_since_use(self, fingerprint: str) -> bool | None:
        for index in self.indexes.values():
            if (lost := index.lost_since_use(fingerprint)) is not None:
                return lost
        return None

    def pressure(self, fingerprint: str) -> float:
        return max((i.pressure(fingerprint) for i in self.indexes.values()), default=0.0)

    def summary(self) -> ResidencySummary:
        counts = dict.fromkeys(Residence, 0)
        for index in self.indexes.values():
            for state, n in index.counts().items():
                counts[state] += n
        return ResidencySummary(
            source="kv_events" if self.indexes else "cached_tokens",
            entries=counts,
            resident_blocks=sum(i.resident_blocks for i in self.indexes.values()),
            stored_blocks=sum(i.stored_total for i in self.indexes.values()),
            removed_blocks=sum(i.removed_total for i in self.indexes.values()),
            unknown_periods=sum(i.unknown_total for i in self.indexes.values()),
        )

    def _hasher(self, block_size: int) -> BlockHasher:
        if block_size not in self._hashers:
            self._hashers[block_size] = self._hasher_for(block_size)
        return self._hashers[block_size]
