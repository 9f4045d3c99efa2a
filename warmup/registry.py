"""The query log and the registry of warm prefixes, in memory: where their state lives.

Every change is made here first, in one synchronous step on the event loop — a short
critical section: nothing awaits inside it, so no lock is needed and none is ever
held across a prefill — and then handed to ``persist``, which writes it to SQLite
(``warmup/store.py``) in order, off the request path. Reads never touch SQLite: a
chat decides whether it hit a warm prefix from here, so a slow or failing disk
cannot hold a chat up.

Records handed out (``QueryRecord``, ``WarmEntry``) are never changed in place: a
change replaces them, so a caller holding one keeps a consistent snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from rag.chat.change_rule import ContextBars
from rag.chat.prompt import PromptPrefix
from warmup.models import QueryRecord, WarmEntry
from warmup.store import Snapshot, WarmupStore

#: Takes one write (a function of the store) and sees that it reaches SQLite.
Persist = Callable[[Callable[[WarmupStore], None]], None]


def decayed(count: float, last_seen: float, now: float, half_life_s: float) -> float:
    """Exponentially decayed count: halves every ``half_life_s`` without a new sighting."""
    return count * 0.5 ** (max(0.0, now - last_seen) / half_life_s)


@dataclass(frozen=True)
class EntryIndex:
    """What detection needs of every entry: the chunks and documents it was built from."""

    chunk_ids: dict[str, tuple[str, ...]]
    doc_ids: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class QueryMatrix:
    """Every query that backs a warm entry, as arrays for vectorized detection."""

    keys: list[str]
    fingerprints: list[str]
    embeddings: np.ndarray  # (n, dim), normalized
    kth_scores: np.ndarray  # (n,): ``ContextBars.chunk``, -1 where None (any chunk)
    fact_bars: np.ndarray  # (n,): ``ContextBars.fact``, NaN where None (the threshold)


#: A query pointing at no entry: no bars either.
_UNASSIGNED = {"fingerprint": None, "kth_score": None, "fact_bar": None}


def _in_memory_only(write: Callable[[WarmupStore], None]) -> None:
    """``Registry()`` without ``persist`` keeps nothing on disk (benchmarks, unit tests)."""


class Registry:
    def __init__(self, persist: Persist | None = None) -> None:
        self._persist: Persist = persist or _in_memory_only
        self._queries: dict[str, QueryRecord] = {}
        self._embeddings: dict[str, np.ndarray] = {}
        self._entries: dict[str, WarmEntry] = {}  # kept with ``queries`` empty
        self._keys: dict[str, set[str]] = {}  # fingerprint → the query keys pointing to it
        self._warm_tokens = 0
        self._matrix: QueryMatrix | None = None
        self._index: EntryIndex | None = None

    # ----- loading ------------------------------------------------------------------

    def load(self, snapshot: Snapshot) -> None:
        """Replace everything with what the store holds (at open, before any change)."""
        self._queries = {q.key: q for q, _ in snapshot.queries}
        self._embeddings = {q.key: e for q, e in snapshot.queries}
        self._entries = {
            e.fingerprint: e.model_copy(update={"queries": []}) for e in snapshot.entries
        }
        self._keys = {}
        for query in self._queries.values():
            if query.fingerprint in self._entries:
                self._keys.setdefault(query.fingerprint, set()).add(query.key)
            elif query.fingerprint is not None:  # its entry is gone: it points nowhere
                self._queries[query.key] = query.model_copy(update=_UNASSIGNED)
        self._warm_tokens = sum(e.prefix_tokens for e in self._entries.values())
        self._changed()

    def snapshot(self) -> Snapshot:
        """Everything, as the store would load it (to rewrite the store after a failure)."""
        return Snapshot(
            queries=[(q, self._embeddings[q.key]) for q in self._queries.values()],
            entries=self.entries(),
        )

    # ----- queries ------------------------------------------------------------------

    def record_query(
        self,
        key: str,
        text: str,
        embedding: np.ndarray,
        now: float,
        half_life_s: float,
        *,
        seed: bool = False,
        weight: float = 1.0,
    ) -> QueryRecord:
        """Count one sighting of ``key`` (its first text and embedding are kept)."""
        old = self._queries.get(key)
        if old is None:
            record = QueryRecord(key=key, text=text, count=weight, last_seen=now, seed=seed)
            self._embeddings[key] = np.asarray(embedding, dtype=np.float32)
        else:
            count = decayed(old.count, old.last_seen, now, half_life_s) + weight
            record = old.model_copy(
                update={"count": count, "last_seen": now, "seed": seed or old.seed}
            )
        self._queries[key] = record
        if old is None:
            vector = self._embeddings[key]
            self._persist(lambda store: store.put_query(record, vector))
        else:  # the embedding is stored already: only the count moves
            self._persist(lambda store: store.count_query(record))
        return record

    def query(self, key: str) -> QueryRecord | None:
        return self._queries.get(key)

    def queries(self) -> list[QueryRecord]:
        return list(self._queries.values())

    def query_count(self) -> int:
        return len(self._queries)

    def embedding(self, key: str) -> np.ndarray | None:
        return self._embeddings.get(key)

    def assign(self, key: str, fingerprint: str | None, bars: ContextBars) -> None:
        """Point a query at the entry that holds its context (None: at nothing), with
        the bars its context sets for detection."""
        old = self._queries.get(key)
        if old is None:
            return
        if fingerprint is not None and fingerprint not in self._entries:
            fingerprint, bars = None, ContextBars()  # that context is not warm
        if old.fingerprint is not None:
            self._keys.get(old.fingerprint, set()).discard(key)
        if fingerprint is not None:
            self._keys.setdefault(fingerprint, set()).add(key)
        self._queries[key] = old.model_copy(
            update={"fingerprint": fingerprint, "kth_score": bars.chunk, "fact_bar": bars.fact}
        )
        self._matrix = None
        self._persist(lambda store: store.assign(key, fingerprint, bars))

    def forget(self, keys: Iterable[str]) -> int:
        """Drop queries from the log (those backing an entry stay); how many went."""
        gone = [k for k in keys if (q := self._queries.get(k)) is not None and not q.fingerprint]
        for key in gone:
            del self._queries[key]
            del self._embeddings[key]
        if gone:
            self._persist(lambda store: store.delete_queries(gone))
        return len(gone)

    def keys_of(self, fingerprint: str) -> list[str]:
        """The query keys whose context is this entry, sorted."""
        return sorted(self._keys.get(fingerprint, ()))

    # ----- entries ------------------------------------------------------------------

    def put_entry(self, entry: WarmEntry) -> None:
        """Register a warm prefix (or renew one: its TTL, its token counts)."""
        stored = entry.model_copy(update={"queries": []})
        old = self._entries.get(entry.fingerprint)
        self._warm_tokens += stored.prefix_tokens - (old.prefix_tokens if old else 0)
        self._entries[entry.fingerprint] = stored
        if old is None or old.chunk_ids != stored.chunk_ids or old.doc_ids != stored.doc_ids:
            self._index = None
        self._persist(lambda store: store.put_entry(stored))

    def rebase(self, fingerprint: str, prefix: PromptPrefix) -> None:
        """The entry's bytes, now rendered from ``prefix``'s chunks. An updated document
        gets new chunk ids (they name its version), so an entry whose passages kept
        their text keeps its fingerprint but must take the new ids: detection and the
        start-up check find chunks by id, and would otherwise see it built from chunks
        that are gone."""
        old = self._entries.get(fingerprint)
        chunk_ids = [p.chunk_id for p in prefix.passages]
        hashes = [p.content_hash for p in prefix.passages]
        if old is None or (old.chunk_ids == chunk_ids and old.content_hashes == hashes):
            return
        self.put_entry(old.model_copy(update={"chunk_ids": chunk_ids, "content_hashes": hashes}))

    def entry(self, fingerprint: str) -> WarmEntry | None:
        entry = self._entries.get(fingerprint)
        return entry.model_copy(update={"queries": self.keys_of(fingerprint)}) if entry else None

    def entries(self) -> list[WarmEntry]:
        """Every entry with its queries, by fingerprint."""
        return [
            e.model_copy(update={"queries": self.keys_of(fp)})
            for fp, e in sorted(self._entries.items())
        ]

    def fingerprints(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, fingerprint: object) -> bool:
        return fingerprint in self._entries

    def record_hit(self, fingerprint: str, now: float) -> None:
        old = self._entries.get(fingerprint)
        if old is None:
            return
        entry = old.model_copy(update={"hits": old.hits + 1, "last_hit": now})
        self._entries[fingerprint] = entry
        self._persist(lambda store: store.record_hit(fingerprint, entry.hits, now))

    def extend(self, fingerprints: Iterable[str], expires_at: float) -> int:
        """Push the TTL of these entries to at least ``expires_at``; how many there were."""
        renewed: list[tuple[str, float]] = []
        for fp in fingerprints:
            old = self._entries.get(fp)
            if old is not None:
                until = max(old.expires_at, expires_at)
                self._entries[fp] = old.model_copy(update={"expires_at": until})
                renewed.append((fp, until))
        if renewed:
            self._persist(lambda store: store.extend(renewed))
        return len(renewed)

    def retire(self, fingerprint: str) -> bool:
        """Forget an entry; its queries keep their history but point nowhere."""
        old = self._entries.pop(fingerprint, None)
        if old is None:
            return False
        self._warm_tokens -= old.prefix_tokens
        for key in self._keys.pop(fingerprint, set()):
            self._queries[key] = self._queries[key].model_copy(update=_UNASSIGNED)
        self._changed()
        self._persist(lambda store: store.retire(fingerprint))
        return True

    def warm_tokens(self) -> int:
        return self._warm_tokens

    def entry_count(self) -> int:
        return len(self._entries)

    # ----- what detection reads ------------------------------------------------------

    def entry_index(self) -> EntryIndex:
        """Chunk and document ids of every entry, cached until an entry changes."""
        if self._index is None:
            self._index = EntryIndex(
                chunk_ids={fp: tuple(e.chunk_ids) for fp, e in self._entries.items()},
                doc_ids={fp: tuple(e.doc_ids) for fp, e in self._entries.items()},
            )
        return self._index

    def query_matrix(self) -> QueryMatrix:
        """Queries attached to entries, cached until the next assignment."""
        if self._matrix is None:
            rows = sorted(
                (q for q in self._queries.values() if q.fingerprint is not None),
                key=lambda q: q.key,
            )
            dim = next(iter(self._embeddings.values())).shape[0] if self._embeddings else 0
            self._matrix = QueryMatrix(
                keys=[q.key for q in rows],
                fingerprints=[q.fingerprint or "" for q in rows],
                embeddings=(
                    np.stack([self._embeddings[q.key] for q in rows])
                    if rows
                    else np.zeros((0, dim), np.float32)
                ),
                kth_scores=np.array(
                    [q.kth_score if q.kth_score is not None else -1.0 for q in rows], np.float32
                ),
                fact_bars=np.array(
                    [q.fact_bar if q.fact_bar is not None else np.nan for q in rows], np.float32
                ),
            )
        return self._matrix

    def _changed(self) -> None:
        self._matrix = None
        self._index = None
