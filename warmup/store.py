"""The warmup layer's persisted state: the query log and the registry of warm prefixes.

One SQLite file in the data folder. Query embeddings are stored with the queries so
that change detection and re-warming never embed a question again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from warmup.models import QueryRecord, WarmEntry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (
    key TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    embedding BLOB NOT NULL,
    count REAL NOT NULL,
    last_seen REAL NOT NULL,
    seed INTEGER NOT NULL DEFAULT 0,
    fingerprint TEXT,
    kth_score REAL
);
CREATE INDEX IF NOT EXISTS queries_by_entry ON queries (fingerprint);
CREATE TABLE IF NOT EXISTS entries (
    fingerprint TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    doc_ids TEXT NOT NULL,
    prefix_tokens INTEGER NOT NULL,
    cached_block_tokens INTEGER NOT NULL,
    warmed_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    last_hit REAL
);
"""


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
    kth_scores: np.ndarray  # (n,)


class WarmupStore:
    """Thread-safe; one connection, serialized by a lock (writes are small and rare)."""

    def __init__(self, path: Path, *, load: bool = True) -> None:
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._matrix: QueryMatrix | None = None
        self._index: EntryIndex | None = None
        if load:
            self.open()

    def open(self) -> None:
        with self._lock:
            if self._conn is not None:
                return
            self._path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            self._conn = db

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the warmup store is not open yet")
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()

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
        with self._lock:
            row = self._db.execute(
                "SELECT count, last_seen, seed FROM queries WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO queries (key, text, embedding, count, last_seen, seed)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (key, text, _blob(embedding), weight, now, int(seed)),
                )
            else:
                count = decayed(row[0], row[1], now, half_life_s) + weight
                self._db.execute(
                    "UPDATE queries SET count = ?, last_seen = ?, seed = ? WHERE key = ?",
                    (count, now, int(seed or row[2]), key),
                )
            record = self.query(key)
        assert record is not None
        return record

    def query(self, key: str) -> QueryRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT key, text, count, last_seen, seed, fingerprint, kth_score"
                " FROM queries WHERE key = ?",
                (key,),
            ).fetchone()
        return _query(row) if row else None

    def query_embedding(self, key: str) -> np.ndarray | None:
        with self._lock:
            row = self._db.execute("SELECT embedding FROM queries WHERE key = ?", (key,)).fetchone()
        return _array(row[0]) if row else None

    def queries(self) -> list[QueryRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, text, count, last_seen, seed, fingerprint, kth_score FROM queries"
            ).fetchall()
        return [_query(r) for r in rows]

    def assign(self, key: str, fingerprint: str | None, kth_score: float | None) -> None:
        """Point a query at the entry that holds its context."""
        with self._lock:
            self._db.execute(
                "UPDATE queries SET fingerprint = ?, kth_score = ? WHERE key = ?",
                (fingerprint, kth_score, key),
            )
            self._matrix = None

    def query_matrix(self) -> QueryMatrix:
        """Queries attached to entries, cached until the next assignment."""
        with self._lock:
            if self._matrix is None:
                rows = self._db.execute(
                    "SELECT key, fingerprint, embedding, kth_score FROM queries"
                    " WHERE fingerprint IS NOT NULL ORDER BY key"
                ).fetchall()
                dim = len(_array(rows[0][2])) if rows else 0
                self._matrix = QueryMatrix(
                    keys=[r[0] for r in rows],
                    fingerprints=[r[1] for r in rows],
                    embeddings=(
                        np.stack([_array(r[2]) for r in rows])
                        if rows
                        else np.zeros((0, dim), np.float32)
                    ),
                    kth_scores=np.array(
                        [r[3] if r[3] is not None else -1.0 for r in rows], np.float32
                    ),
                )
            return self._matrix

    # ----- entries ------------------------------------------------------------------

    def put_entry(self, entry: WarmEntry) -> None:
        body = entry.model_dump(include={"messages", "content_hashes", "triples"})
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO entries (fingerprint, body, chunk_ids, doc_ids,"
                " prefix_tokens, cached_block_tokens, warmed_at, expires_at, hits, last_hit)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.fingerprint,
                    json.dumps(body, ensure_ascii=False),
                    json.dumps(entry.chunk_ids),
                    json.dumps(entry.doc_ids),
                    entry.prefix_tokens,
                    entry.cached_block_tokens,
                    entry.warmed_at,
                    entry.expires_at,
                    entry.hits,
                    entry.last_hit,
                ),
            )
            self._index = None

    def entry(self, fingerprint: str) -> WarmEntry | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE fingerprint = ?", (fingerprint,)
            ).fetchone()
            return self._entry(row) if row else None

    def entries(self) -> list[WarmEntry]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM entries ORDER BY fingerprint"
            ).fetchall()
            keys: dict[str, list[str]] = {}
            for key, fingerprint in self._db.execute(
                "SELECT key, fingerprint FROM queries WHERE fingerprint IS NOT NULL ORDER BY key"
            ):
                keys.setdefault(fingerprint, []).append(key)
        return [self._build(r, keys.get(r[0], [])) for r in rows]

    def entry_index(self) -> EntryIndex:
        """Chunk and document ids of every entry, cached until an entry changes."""
        with self._lock:
            if self._index is None:
                rows = self._db.execute("SELECT fingerprint, chunk_ids, doc_ids FROM entries")
                chunks, docs = {}, {}
                for fingerprint, chunk_ids, doc_ids in rows:
                    chunks[fingerprint] = tuple(json.loads(chunk_ids))
                    docs[fingerprint] = tuple(json.loads(doc_ids))
                self._index = EntryIndex(chunk_ids=chunks, doc_ids=docs)
            return self._index

    def _entry(self, row: Any) -> WarmEntry:
        keys = [
            r[0]
            for r in self._db.execute(
                "SELECT key FROM queries WHERE fingerprint = ? ORDER BY key", (row[0],)
            )
        ]
        return self._build(row, keys)

    @staticmethod
    def _build(row: Any, keys: list[str]) -> WarmEntry:
        return WarmEntry(
            fingerprint=str(row[0]),
            chunk_ids=json.loads(row[2]),
            doc_ids=json.loads(row[3]),
            prefix_tokens=int(row[4]),
            cached_block_tokens=int(row[5]),
            warmed_at=float(row[6]),
            expires_at=float(row[7]),
            hits=int(row[8]),
            last_hit=row[9],
            queries=keys,
            **json.loads(row[1]),
        )

    def extend(self, fingerprints: Iterable[str], expires_at: float) -> int:
        with self._lock:
            cur = self._db.executemany(
                "UPDATE entries SET expires_at = max(expires_at, ?) WHERE fingerprint = ?",
                [(expires_at, fp) for fp in fingerprints],
            )
            return int(cur.rowcount)

    def record_hit(self, fingerprint: str, now: float) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE entries SET hits = hits + 1, last_hit = ? WHERE fingerprint = ?",
                (now, fingerprint),
            )

    def retire(self, fingerprint: str) -> None:
        """Forget an entry; its queries keep their history but point nowhere."""
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM entries WHERE fingerprint = ?", (fingerprint,))
            self._db.execute(
                "UPDATE queries SET fingerprint = NULL, kth_score = NULL WHERE fingerprint = ?",
                (fingerprint,),
            )
            self._db.execute("COMMIT")
            self._matrix = None
            self._index = None

    def warm_tokens(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT coalesce(sum(prefix_tokens), 0) FROM entries").fetchone()
        return int(row[0])

    def entry_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM entries").fetchone()[0])


_ENTRY_COLUMNS = (
    "fingerprint, body, chunk_ids, doc_ids, prefix_tokens, cached_block_tokens,"
    " warmed_at, expires_at, hits, last_hit"
)


def _blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def _array(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


def _query(row: Any) -> QueryRecord:
    return QueryRecord(
        key=str(row[0]),
        text=str(row[1]),
        count=float(row[2]),
        last_seen=float(row[3]),
        seed=bool(row[4]),
        fingerprint=row[5],
        kth_score=row[6],
    )
