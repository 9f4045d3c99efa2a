"""The knowledge graph on disk: one SQLite file, written one change at a time.

A change to the graph writes only the rows it touches (the replaced documents' edges, the
nodes and vectors they add or orphan, the documents' versions) in one transaction. The
layout it replaces, a node-link ``graph.json`` and two ``.npz`` embedding files, was
rewritten whole on every write: O(graph) per ingest, about 80 MB of vectors at 50k
triples. A crash leaves the last committed change; there is nothing to repair between
files any more.

Tables: ``edges`` (one triple of one document, keyed by document and position),
``nodes`` (key and display name), ``vectors`` (float32 bytes by kind, "node" or
"triple", and key), ``documents`` (the version of each document the graph reflects,
set by whoever syncs it) and ``meta`` (the format).

A folder of the old layout is read once, written here in one transaction, and its files
are kept renamed ``*.migrated``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from durable import forget_cached_pages, remove_stale_temps
from durable.sqlite import as_os_error
from kg.embeddings import EmbeddingTable
from kg.lead_rows import Codes
from kg.models import EdgeRow, shared

log = logging.getLogger(__name__)

GRAPH_DB_FILE = "graph.sqlite3"
FORMAT_VERSION = 2
MIGRATED_SUFFIX = ".migrated"

#: The layout before this file: node-link JSON, the embeddings, and the document
#: versions the graph's sync kept beside them.
LEGACY_GRAPH_FILE = "graph.json"
LEGACY_NODE_VECTORS_FILE = "node_embeddings.npz"
LEGACY_TRIPLE_VECTORS_FILE = "triple_embeddings.npz"
LEGACY_VERSIONS_FILE = "synced_documents.json"
_LEGACY_FILES = (
    LEGACY_GRAPH_FILE,
    LEGACY_NODE_VECTORS_FILE,
    LEGACY_TRIPLE_VECTORS_FILE,
    LEGACY_VERSIONS_FILE,
)

NODE, TRIPLE = "node", "triple"
_VECTOR_BLOCK_ROWS = 16_384

#: The write-ahead log is cut back to this after a checkpoint; a whole-graph write
#: (``replace``) checkpoints at once, or its log would stay as large as the graph.
_WAL_LIMIT_BYTES = 64 * 2**20

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS edges (
    doc_id TEXT NOT NULL, position INTEGER NOT NULL,
    subject TEXT NOT NULL, object TEXT NOT NULL,
    predicate TEXT NOT NULL, chunk_id TEXT, source TEXT NOT NULL,
    subject_name TEXT NOT NULL, object_name TEXT NOT NULL,
    PRIMARY KEY (doc_id, position)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS nodes (key TEXT PRIMARY KEY, name TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vectors (kind TEXT NOT NULL, key TEXT NOT NULL, vector BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_key ON vectors (kind, key);
CREATE TABLE IF NOT EXISTS documents (doc_id TEXT PRIMARY KEY, version TEXT NOT NULL)
    WITHOUT ROWID;
"""


@dataclass
class Vectors:
    """Keys and their (n, dim) float32 vectors, with the rows' int8 codes where a saved
    snapshot read back made them already (``kg.int8_rows``). Key i's vector is row i, or
    row ``rows[i]`` where given: a matrix with rows no key names (a saved snapshot's grown
    triples' file, ``kg.snapshot_file``)."""

    keys: list[str] = field(default_factory=list)
    matrix: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    codes: Codes | None = None
    rows: np.ndarray | None = None

    @classmethod
    def of(cls, table: EmbeddingTable, keys: Sequence[str]) -> Vectors:
        """Those of ``keys`` that ``table`` holds, with their vectors."""
        present = [k for k in keys if k in table]
        return cls(present, table.gather(present)) if present else cls()


VectorSink = Callable[[str, int, Iterator[tuple[list[str], np.ndarray]]], Vectors]
"""Takes a kind's vectors as the graph's file reads them (the kind, their count, blocks of
keys and rows in the table's order) and returns them as ``Vectors``: ``in_memory``, or files
(``kg.row_files.file_sink``)."""


@dataclass
class GraphChange:
    """What one change writes. The ``replaced`` documents' edges are deleted first, then
    ``edges`` are inserted; a version of None deletes the document's version."""

    replaced: set[str] = field(default_factory=set)
    versions: dict[str, str | None] = field(default_factory=dict)
    edges: list[EdgeRow] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)
    removed_nodes: set[str] = field(default_factory=set)
    node_vectors: Vectors = field(default_factory=Vectors)
    triple_vectors: Vectors = field(default_factory=Vectors)
    removed_node_vectors: set[str] = field(default_factory=set)
    removed_triple_vectors: set[str] = field(default_factory=set)


@dataclass
class GraphRows:
    """Everything the file holds, as read at start."""

    edges: list[EdgeRow] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)
    node_vectors: Vectors = field(default_factory=Vectors)
    triple_vectors: Vectors = field(default_factory=Vectors)
    versions: dict[str, str] = field(default_factory=dict)


class GraphFile:
    """The graph's SQLite file; thread-safe (one connection behind a lock)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._path = folder / GRAPH_DB_FILE
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None

    @property
    def path(self) -> Path:
        return self._path

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def read(
        self, legacy: Any = None, vectors: bool = True, sink: VectorSink | None = None
    ) -> GraphRows:
        """Every row (without ``vectors``, none of the vectors; with a ``sink``, the
        vectors as it keeps them, else in memory). A folder of the old layout is first
        moved in (``legacy`` reads its graph file and returns ``GraphRows``)."""
        with self._lock:
            db = self._connection()
            known = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            if known is None and (self._folder / LEGACY_GRAPH_FILE).exists() and legacy:
                rows: GraphRows = legacy(self._folder)
                rows.versions = self._legacy_versions()
                self.replace(rows)
                log.info(
                    "knowledge graph: moved %d triples and %d documents' versions from %s into %s",
                    len(rows.edges),
                    len(rows.versions),
                    LEGACY_GRAPH_FILE,
                    GRAPH_DB_FILE,
                )
            self._retire_legacy()
            return self._read_all(db, vectors, sink, self._path)

    def summary(self) -> tuple[int, dict[str, str]]:
        """The count of edges and each document's version: what a saved snapshot is
        checked against before a change (reading every row took 94-103 s at 1,000,000
        chunks; counting them takes a fraction of a second)."""
        with self._lock:
            try:
                db = self._connection()
                (count,) = db.execute("SELECT COUNT(*) FROM edges").fetchone()
                versions = dict(db.execute("SELECT doc_id, version FROM documents"))
            except sqlite3.Error as exc:
                raise as_os_error(exc) from exc
        return int(count), versions

    def write(self, change: GraphChange) -> None:
        """Apply one change in one transaction."""
        with self._transaction() as db:
            self._apply(db, change)

    def replace(self, rows: GraphRows) -> None:
        """Write the whole graph in one transaction (a graph kept in memory, or moved in)."""
        with self._transaction() as db:
            for table in ("edges", "nodes", "vectors", "documents"):
                db.execute(f"DELETE FROM {table}")
            self._apply(
                db,
                GraphChange(
                    versions=dict(rows.versions),
                    edges=rows.edges,
                    nodes=rows.nodes,
                    node_vectors=rows.node_vectors,
                    triple_vectors=rows.triple_vectors,
                ),
            )
        with self._lock:
            self._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- internals ------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._folder.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(str(self._path), check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")  # a committed change survives a power cut
                db.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT_BYTES}")
                db.executescript(_SCHEMA)
            except sqlite3.Error as exc:
                raise as_os_error(exc) from exc
            self._db = db
        return self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._connection()
            try:
                db.execute("BEGIN IMMEDIATE")
                yield db
                db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(FORMAT_VERSION),)
                )
                db.execute("COMMIT")
            except BaseException as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise as_os_error(exc) from exc
                raise

    @staticmethod
    def _apply(db: sqlite3.Connection, change: GraphChange) -> None:
        db.executemany("DELETE FROM edges WHERE doc_id = ?", [(d,) for d in change.replaced])
        db.executemany(
            "INSERT INTO edges VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    e.doc_id,
                    e.position,
                    e.subject,
                    e.object,
                    e.predicate,
                    e.chunk_id,
                    e.source,
                    e.subject_name,
                    e.object_name,
                )
                for e in change.edges
            ],
        )
        db.executemany("DELETE FROM nodes WHERE key = ?", [(k,) for k in change.removed_nodes])
        db.executemany("INSERT OR REPLACE INTO nodes VALUES (?, ?)", change.nodes.items())
        for kind, removed, added in (
            (NODE, change.removed_node_vectors, change.node_vectors),
            (TRIPLE, change.removed_triple_vectors, change.triple_vectors),
        ):
            db.executemany(
                "DELETE FROM vectors WHERE kind = ? AND key = ?", [(kind, k) for k in removed]
            )
            db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                [
                    (kind, key, np.asarray(row, dtype="<f4").tobytes())
                    for key, row in zip(added.keys, added.matrix, strict=True)
                ],
            )
        versions = change.versions.items()
        db.executemany(
            "DELETE FROM documents WHERE doc_id = ?", [(d,) for d, v in versions if v is None]
        )
        db.executemany(
            "INSERT OR REPLACE INTO documents VALUES (?, ?)",
            [(d, v) for d, v in versions if v is not None],
        )

    @staticmethod
    def _read_all(
        db: sqlite3.Connection,
        with_vectors: bool = True,
        sink: VectorSink | None = None,
        path: Path | None = None,
    ) -> GraphRows:
        try:
            edges = [
                EdgeRow.stored(row)
                for row in db.execute(
                    "SELECT doc_id, position, subject, object, predicate, chunk_id, source, "
                    "subject_name, object_name FROM edges ORDER BY doc_id, position"
                )
            ]
            nodes = {shared(k): shared(n) for k, n in db.execute("SELECT key, name FROM nodes")}
            vectors = {
                kind: _read_vectors(db, kind, sink or in_memory, path)
                if with_vectors
                else Vectors()
                for kind in (NODE, TRIPLE)
            }
            versions = dict(db.execute("SELECT doc_id, version FROM documents"))
        except sqlite3.Error as exc:
            raise as_os_error(exc) from exc
        return GraphRows(edges, nodes, vectors[NODE], vectors[TRIPLE], versions)

    def _legacy_versions(self) -> dict[str, str]:
        path = self._folder / LEGACY_VERSIONS_FILE
        if not path.exists():
            return {}
        return {str(k): str(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}

    def _retire_legacy(self) -> None:
        """Keep the old layout's files, renamed, once their content is in the file."""
        for name in _LEGACY_FILES:
            remove_stale_temps(self._folder, name)
            old = self._folder / name
            if old.exists():
                old.replace(old.with_name(name + MIGRATED_SUFFIX))


def _read_vectors(
    db: sqlite3.Connection, kind: str, sink: VectorSink, path: Path | None = None
) -> Vectors:
    """Every vector of ``kind``, in the order the table stores them, handed to ``sink``
    a block at a time. The table is scanned (``NOT INDEXED``), not read through its key
    index: in key order each row was a read at another place in the file, 15.1 s for the
    533,000 vectors of 100,000 chunks from out of the page cache, against 3.0 s scanned
    (for both kinds; the second scan finds the file in the page cache).

    The scanned pages of the file at ``path`` are then dropped from the page cache
    (``forget_cached_pages``): read once at a start after a crash and not again, they
    pushed out the snapshot's vector files that every question reads rows of. At
    1,000,000 chunks (11 GB file) a question's p50 after such a start was 45-50 ms with
    them kept, 33 ms with them dropped (the triple vectors' file 0.3-1.1 of 4.6 GB in the
    page cache after the questions, against 3.4)."""
    (count,) = db.execute("SELECT COUNT(*) FROM vectors WHERE kind = ?", (kind,)).fetchone()
    if not count:
        return Vectors()
    rows = db.execute("SELECT key, vector FROM vectors NOT INDEXED WHERE kind = ?", (kind,))
    try:
        return sink(kind, count, _vector_blocks(rows, share=kind == NODE))
    finally:
        if path is not None:
            forget_cached_pages(path)


def _vector_blocks(rows: sqlite3.Cursor, share: bool) -> Iterator[tuple[list[str], np.ndarray]]:
    """The rows a block at a time. ``share``: the keys are ``shared`` (the nodes', which
    the edges' ends already share: a copy of each cost 16 MiB at 209,000 entities). The
    triple texts are not: interned, they would grow the interning table for good; the
    snapshot takes the table's key objects instead (``GraphSnapshot.build_from``)."""
    while batch := rows.fetchmany(_VECTOR_BLOCK_ROWS):
        keys = [shared(key) for key, _ in batch] if share else [key for key, _ in batch]
        matrix = np.frombuffer(b"".join(blob for _, blob in batch), dtype="<f4")
        yield keys, matrix.reshape(len(batch), -1).astype(np.float32, copy=False)


def in_memory(kind: str, count: int, blocks: Iterator[tuple[list[str], np.ndarray]]) -> Vectors:
    """The default ``VectorSink``: one matrix in memory, filled a block at a time, that
    the graph adopts as it is (a second copy into the graph's table cost a start 3.5 s
    at 532,000 vectors)."""
    keys: list[str] = []
    matrix = np.zeros((0, 0), np.float32)
    for block_keys, block in blocks:
        if not keys:
            matrix = np.empty((count, block.shape[1]), dtype=np.float32)
        matrix[len(keys) : len(keys) + len(block)] = block
        keys.extend(block_keys)
    return Vectors(keys, matrix[: len(keys)])


def node_names(rows: GraphRows) -> dict[str, str]:
    """The display name of every node an edge of ``rows`` joins: its row's, or (a node
    without a row, normally none) its first surface form. Nodes without edges are left out."""
    names: dict[str, str] = {}
    for edge in rows.edges:  # in (doc_id, position) order
        for key, name in ((edge.subject, edge.subject_name), (edge.object, edge.object_name)):
            if key not in names:
                names[key] = rows.nodes.get(key, name)
    return names
