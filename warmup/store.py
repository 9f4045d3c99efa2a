"""The warmup layer's persisted state: the query log and the registry of warm prefixes.

One SQLite file in the data folder. While the service runs, the state lives in
memory (``warmup/registry.py``) and this store is where it is written to, so that a
restart finds it; it is read once, at open. Query embeddings are stored with the
queries so that change detection and re-warming never embed a question again.
Knowledge-base changes are kept here from their notification until their detection
is done, so a process killed in between replays them at the next start.

Every write is one transaction. On any error it rolls back and the connection is
closed, to be opened afresh by the next call: a locked file, a full disk or an I/O
error fails that write only, and never leaves the connection inside a transaction.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rag.chat.change_rule import ContextBars
from rag.knowledge.models import ChangeSet
from warmup.models import QueryRecord, WarmEntry
from warmup.pending import array, blob, dump_change, load_change

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (
    key TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    embedding BLOB NOT NULL,
    count REAL NOT NULL,
    last_seen REAL NOT NULL,
    seed INTEGER NOT NULL DEFAULT 0,
    fingerprint TEXT,
    kth_score REAL,
    fact_bar REAL
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
CREATE TABLE IF NOT EXISTS pending_changes (
    seq INTEGER PRIMARY KEY,
    body TEXT NOT NULL
);
"""

#: How long a write waits for another connection's lock before it fails ("database is
#: locked"). Writes run off the event loop, so the wait holds up no chat.
BUSY_TIMEOUT_S = 5.0


@dataclass
class Snapshot:
    """Everything the store holds: the registry, and the knowledge-base changes whose
    detection has not finished (by sequence number)."""

    queries: list[tuple[QueryRecord, np.ndarray]] = field(default_factory=list)
    entries: list[WarmEntry] = field(default_factory=list)
    pending: list[tuple[int, ChangeSet]] = field(default_factory=list)


class WarmupStore:
    """Thread-safe: one connection, serialized by a lock.

    ``connection_factory`` is the ``sqlite3.Connection`` subclass to connect with
    (tests pass one that fails on demand)."""

    def __init__(
        self,
        path: Path,
        *,
        load: bool = True,
        connection_factory: type[sqlite3.Connection] = sqlite3.Connection,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self._path = path
        self.connection_factory = connection_factory
        self._busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None
        self._opened = False
        self._lock = threading.RLock()
        self._depth = 0
        self.failures = 0  # writes that failed and were rolled back
        if load:
            self.open()

    def open(self) -> None:
        with self._lock:
            self._opened = True
            self._connection()

    def close(self) -> None:
        with self._lock:
            self._opened = False
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> sqlite3.Connection:
        """The open connection, or a new one (after ``open``, or after a failed write)."""
        if self._conn is None:
            if not self._opened:
                raise RuntimeError("the warmup store is not open yet")
            self._path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_s,
                check_same_thread=False,
                isolation_level=None,
                factory=self.connection_factory,
            )
            try:
                db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_SCHEMA)
                _add_missing_columns(db)
            except BaseException:
                db.close()
                raise
            self._conn = db
        return self._conn

    @property
    def in_transaction(self) -> bool:
        with self._lock:
            return self._conn is not None and self._conn.in_transaction

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction (nested calls join the outer one): committed at the end,
        rolled back on any error, after which the connection is reopened on next use.
        ``write`` takes the write lock at the start (waiting up to the busy timeout),
        so a write never fails half-way for want of it."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._connection()
                finally:
                    self._depth -= 1
                return
            db = self._connection()
            self._depth = 1
            try:
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                yield db
                db.execute("COMMIT")
            except BaseException:
                self._recover(db)
                raise
            finally:
                self._depth = 0

    def _recover(self, db: sqlite3.Connection) -> None:
        self.failures += 1
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.Error:
            log.warning("warmup store: rollback failed; the connection is closed anyway")
        finally:
            db.close()
            self._conn = None  # reconnect on next use

    # ----- reading ------------------------------------------------------------------

    def load(self) -> Snapshot:
        """Every query (with its embedding), every entry, every pending change."""
        with self.transaction(write=False) as db:
            rows = db.execute(f"SELECT {_QUERY_COLUMNS}, embedding FROM queries").fetchall()
            queries = [(_query(r), array(r[8])) for r in rows]
            entries = [
                _entry(r)
                for r in db.execute(f"SELECT {_ENTRY_COLUMNS} FROM entries ORDER BY fingerprint")
            ]
            pending = [
                (int(seq), load_change(body))
                for seq, body in db.execute("SELECT seq, body FROM pending_changes ORDER BY seq")
            ]
        return Snapshot(queries=queries, entries=entries, pending=pending)

    # ----- writing ------------------------------------------------------------------

    def put_query(self, record: QueryRecord, embedding: np.ndarray) -> None:
        with self.transaction() as db:
            _put_query(db, record, embedding)

    def count_query(self, record: QueryRecord) -> None:
        """A new sighting of a stored query: its decayed count, last sighting, seed flag."""
        with self.transaction() as db:
            db.execute(
                "UPDATE queries SET count = ?, last_seen = ?, seed = ? WHERE key = ?",
                (record.count, record.last_seen, int(record.seed), record.key),
            )

    def assign(self, key: str, fingerprint: str | None, bars: ContextBars) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE queries SET fingerprint = ?, kth_score = ?, fact_bar = ? WHERE key = ?",
                (fingerprint, bars.chunk, bars.fact, key),
            )

    def delete_queries(self, keys: Iterable[str]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM queries WHERE key = ?", [(k,) for k in keys])

    def put_entry(self, entry: WarmEntry) -> None:
        with self.transaction() as db:
            _put_entry(db, entry)

    def record_hit(self, fingerprint: str, hits: int, last_hit: float) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE entries SET hits = ?, last_hit = ? WHERE fingerprint = ?",
                (hits, last_hit, fingerprint),
            )

    def extend(self, expiries: Iterable[tuple[str, float]]) -> None:
        with self.transaction() as db:
            db.executemany(
                "UPDATE entries SET expires_at = ? WHERE fingerprint = ?",
                [(expires_at, fp) for fp, expires_at in expiries],
            )

    def retire(self, fingerprint: str) -> None:
        """Forget an entry; its queries keep their history but point nowhere."""
        with self.transaction() as db:
            db.execute("DELETE FROM entries WHERE fingerprint = ?", (fingerprint,))
            db.execute(
                "UPDATE queries SET fingerprint = NULL, kth_score = NULL, fact_bar = NULL"
                " WHERE fingerprint = ?",
                (fingerprint,),
            )

    def add_pending(self, seq: int, change: ChangeSet) -> None:
        """Keep a change until its detection is done (``drop_pending``)."""
        with self.transaction() as db:
            _put_pending(db, seq, change)

    def drop_pending(self, up_to_seq: int) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM pending_changes WHERE seq <= ?", (up_to_seq,))

    def replace_all(self, snapshot: Snapshot) -> None:
        """Make the store hold exactly ``snapshot`` (one transaction)."""
        with self.transaction() as db:
            for table in ("queries", "entries", "pending_changes"):
                db.execute(f"DELETE FROM {table}")
            for record, embedding in snapshot.queries:
                _put_query(db, record, embedding)
            for entry in snapshot.entries:
                _put_entry(db, entry)
            for seq, change in snapshot.pending:
                _put_pending(db, seq, change)


_QUERY_COLUMNS = "key, text, count, last_seen, seed, fingerprint, kth_score, fact_bar"

#: Columns added since the first schema, with their type: a store written before one
#: was added gains it, NULL, at open (NULL is what each means where nothing is known).
_ADDED_COLUMNS = {"queries": {"fact_bar": "REAL"}}


def _add_missing_columns(db: sqlite3.Connection) -> None:
    for table, columns in _ADDED_COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns.items():
            if name not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


_ENTRY_COLUMNS = (
    "fingerprint, body, chunk_ids, doc_ids, prefix_tokens, cached_block_tokens,"
    " warmed_at, expires_at, hits, last_hit"
)


def _put_query(db: sqlite3.Connection, record: QueryRecord, embedding: np.ndarray) -> None:
    db.execute(
        f"INSERT OR REPLACE INTO queries ({_QUERY_COLUMNS}, embedding)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            record.key,
            record.text,
            record.count,
            record.last_seen,
            int(record.seed),
            record.fingerprint,
            record.kth_score,
            record.fact_bar,
            blob(embedding),
        ),
    )


def _put_entry(db: sqlite3.Connection, entry: WarmEntry) -> None:
    body = entry.model_dump(
        include={"messages", "content_hashes", "triples", "replica", "context_tokens"}
    )
    db.execute(
        f"INSERT OR REPLACE INTO entries ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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


def _put_pending(db: sqlite3.Connection, seq: int, change: ChangeSet) -> None:
    db.execute(
        "INSERT OR REPLACE INTO pending_changes (seq, body) VALUES (?, ?)",
        (seq, dump_change(change)),
    )


def _query(row: Any) -> QueryRecord:
    return QueryRecord(
        key=str(row[0]),
        text=str(row[1]),
        count=float(row[2]),
        last_seen=float(row[3]),
        seed=bool(row[4]),
        fingerprint=row[5],
        kth_score=row[6],
        fact_bar=row[7],
    )


def _entry(row: Any) -> WarmEntry:
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
        **json.loads(row[1]),
    )
