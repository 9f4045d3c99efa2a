"""Which warm prefixes one vLLM server holds, from its KV-cache events.

vLLM keeps prefix blocks by LRU alone and tells nobody when it drops one, except
through its KV-cache events (``rag.llm.kv_events``). ``ResidencyIndex`` keeps the set
of block hashes the events say are stored, maps each warm entry to the hashes of its
warmed full blocks (``rag.llm.block_hashes``), and answers, at any moment, whether an
entry is fully, partly or not resident, or unknown: after a lost batch of events
nothing believed resident is trusted until vLLM shows it again.

It also keeps an LRU clock: the count of blocks vLLM stored. An entry's *age* is the
blocks stored since a request last used it; vLLM evicts the least recently freed
block first, so an entry whose age approaches the cache's size is near the LRU tail
(``pressure``) and is re-touched before it falls off (``warmup.keeper``).

Events arrive on the subscriber's thread and reads come from the event loop: one lock
guards the state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Residence(StrEnum):
    FULL = "full"  # every warmed block is in vLLM's cache
    PARTIAL = "partial"  # some leading blocks are
    NONE = "none"  # the first block is gone: nothing of it can be reused
    UNKNOWN = "unknown"  # events were lost since it was last seen resident


@dataclass(frozen=True)
class EntryResidency:
    state: Residence
    #: Leading warmed blocks resident (vLLM reuses a prefix up to its first missing block).
    resident_blocks: int
    blocks: int
    #: Blocks vLLM stored since a request last used this entry (the LRU clock).
    age_blocks: int


class ResidencyIndex:
    """One vLLM server's prefix cache as its events describe it (a ``BlockEvents`` sink),
    mapped to warm entries by fingerprint."""

    def __init__(
        self,
        block_size: int = 0,
        capacity_blocks: int = 1,
        *,
        on_evicted: Callable[[set[str]], None] | None = None,
    ) -> None:
        """The block size and capacity are vLLM's; an index made before vLLM answered
        gets them from ``configure``. ``on_evicted``: called with the entries that
        lost a block (on the subscriber's thread)."""
        self.configure(block_size, capacity_blocks)
        self.on_evicted = on_evicted
        self._lock = threading.Lock()
        self._resident: set[int] = set()
        self._uncertain: set[int] = set()
        self._blocks: dict[str, tuple[int, ...]] = {}
        self._owners: dict[int, set[str]] = {}
        self._last_use: dict[str, int] = {}
        #: Entries that lost a block, or whose state became unknown, since last used.
        self._lost: set[str] = set()
        self._unsure: set[str] = set()
        #: Blocks vLLM stored since start: the LRU clock.
        self.stored_total = 0
        self.removed_total = 0
        self.unknown_total = 0

    def configure(self, block_size: int, capacity_blocks: int) -> None:
        self.block_size = block_size
        self.capacity_blocks = max(1, capacity_blocks)

    # ----- events (the subscriber's thread) -------------------------------------------

    def stored(self, hashes: Sequence[int]) -> None:
        with self._lock:
            self._resident.update(hashes)
            self._uncertain.difference_update(hashes)
            self.stored_total += len(hashes)

    def removed(self, hashes: Sequence[int]) -> None:
        hit: set[str] = set()
        with self._lock:
            for h in hashes:
                self._resident.discard(h)
                self._uncertain.discard(h)
                hit |= self._owners.get(h, set())
            self.removed_total += len(hashes)
            self._lost |= hit
        if hit and self.on_evicted is not None:
            self.on_evicted(hit)

    def cleared(self) -> None:
        """vLLM emptied its cache (a reset, or a new vLLM process): known empty."""
        with self._lock:
            self._resident.clear()
            self._uncertain.clear()
            self._lost |= set(self._blocks)

    def unknown(self, reason: str = "") -> None:
        """Events were lost: what was resident may since have been evicted."""
        with self._lock:
            self._uncertain |= self._resident
            self._resident.clear()
            self._unsure |= set(self._blocks)
            self.unknown_total += 1

    # ----- warm entries (the event loop) ----------------------------------------------

    def track(self, fingerprint: str, hashes: Sequence[int]) -> None:
        """``fingerprint`` was just warmed: its blocks are ``hashes`` and resident (the
        request that warmed them returned; a fully cached prefill stores nothing, so
        no event would say so)."""
        with self._lock:
            self._forget(fingerprint)
            self._blocks[fingerprint] = tuple(hashes)
            for h in hashes:
                self._owners.setdefault(h, set()).add(fingerprint)
            self._use(fingerprint)

    def used(self, fingerprint: str) -> None:
        """A request just reused ``fingerprint``'s blocks from cache: resident, and now
        the most recently used (vLLM moved them to the LRU's far end)."""
        with self._lock:
            if fingerprint in self._blocks:
                self._use(fingerprint)

    def untrack(self, fingerprint: str) -> None:
        with self._lock:
            self._forget(fingerprint)

    def keep_only(self, fingerprints: Iterable[str]) -> int:
        """Forget entries not in ``fingerprints`` (retired meanwhile); how many."""
        keep = set(fingerprints)
        with self._lock:
            gone = [fp for fp in self._blocks if fp not in keep]
            for fp in gone:
                self._forget(fp)
        return len(gone)

    def tracked(self) -> list[str]:
        with self._lock:
            return sorted(self._blocks)

    def state(self, fingerprint: str) -> EntryResidency | None:
        """How ``fingerprint`` stands (None: not tracked)."""
        with self._lock:
            blocks = self._blocks.get(fingerprint)
            if blocks is None:
                return None
            lead = self._leading(blocks)
            age = self.stored_total - self._last_use.get(fingerprint, self.stored_total)
            if lead == len(blocks):
                state = Residence.FULL
            elif blocks[lead] in self._uncertain:
                state = Residence.UNKNOWN
            else:
                state = Residence.PARTIAL if lead else Residence.NONE
            return EntryResidency(state, lead, len(blocks), age)

    def lost_since_use(self, fingerprint: str) -> bool | None:
        """Whether vLLM dropped a block of ``fingerprint`` since a request last used it:
        the index's prediction that the next chat on it misses (None: unknown, events
        were lost meanwhile). Taken from evictions, not from the blocks' state, so the
        chat's own recomputation (stored while it runs) does not hide the miss."""
        with self._lock:
            if fingerprint not in self._blocks or fingerprint in self._unsure:
                return None
            return fingerprint in self._lost

    def pressure(self, fingerprint: str) -> float:
        """How near the LRU tail the entry is: its age as a share of the cache (0: just
        used; 1: a full cache's worth of blocks was stored since)."""
        residency = self.state(fingerprint)
        return 0.0 if residency is None else residency.age_blocks / self.capacity_blocks

    def predict_cached_tokens(self, hashes: Sequence[int], prompt_tokens: int) -> int:
        """The ``cached_tokens`` vLLM should report for a prompt whose full blocks are
        ``hashes``: its leading resident blocks; vLLM always computes the last prompt
        token, so a prompt that ends on a block boundary reuses one block less."""
        with self._lock:
            lead = self._leading(hashes)
        limit = (prompt_tokens - 1) // self.block_size
        return min(lead, limit) * self.block_size

    def counts(self) -> dict[Residence, int]:
        out = dict.fromkeys(Residence, 0)
        for fp in self.tracked():
            if (residency := self.state(fp)) is not None:
                out[residency.state] += 1
        return out

    @property
    def resident_blocks(self) -> int:
        with self._lock:
            return len(self._resident)

    # ----- helpers (the lock held) ----------------------------------------------------

    def _leading(self, hashes: Sequence[int]) -> int:
        lead = 0
        for h in hashes:
            if h not in self._resident:
                break
            lead += 1
        return lead

    def _use(self, fingerprint: str) -> None:
        blocks = self._blocks[fingerprint]
        self._resident.update(blocks)
        self._uncertain.difference_update(blocks)
        self._last_use[fingerprint] = self.stored_total
        self._lost.discard(fingerprint)
        self._unsure.discard(fingerprint)

    def _forget(self, fingerprint: str) -> None:
        for h in self._blocks.pop(fingerprint, ()):
            owners = self._owners.get(h)
            if owners is not None:
                owners.discard(fingerprint)
                if not owners:
                    del self._owners[h]
        self._last_use.pop(fingerprint, None)
        self._lost.discard(fingerprint)
        self._unsure.discard(fingerprint)
