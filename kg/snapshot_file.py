"""The graph's read-side index, saved when the graph closes cleanly, read back at the
next start instead of being rebuilt from every row.

A start that builds the ``GraphSnapshot`` from ``graph.sqlite3`` reads every edge and
vector row and sorts them: 17.5-20 s at 323,000 triples, most of a 37 s start with
100,000 chunks. Loading the saved arrays is a file read.

The vectors (780 MiB at 323,000 triples, 60 % of what the graph holds) are saved as two
``.npy`` files of their own, named after the snapshot's id, and mapped into memory at a
start rather than read: they stay on the page cache, paged in as queries touch them, and
new vectors go to the in-memory part of the tables after them (``RowMatrix``). Chats read
a few thousand triple vectors each (the candidates); the node vectors are all read by
each question's similarity scan, so they stay paged in, but as file pages the kernel can
drop under pressure rather than the process's own memory.

It is never stale: every write to the graph's file removes it first (``discard``), so
it exists only while the file is as it was when the snapshot was saved. A crash at any
point leaves it either whole and current, or absent (written beside and renamed into
place, the vector files first, ``snapshot.npz`` last); absent, or unreadable, a start
builds from the rows as before (``kg.row_files``).

The vector files a write leaves (named by no snapshot once it is removed) stay until the
next save: those the start mapped then grow by the rows written since instead of being
written whole again (``kg.saved_vectors``: at 1,000,000 chunks the triples' is 4.9 GB and
the entities' 3.2 GB, and a stop after a one-document change rewrote both), and the
entities' codes with them (``kg.saved_codes``), and the table of every list's strings
(``kg.table_file``: 39 of the 61.5 MB ``snapshot.npz`` held at 100,000 chunks, as JSON).
``snapshot.npz`` records each entity's and each edge's row in them, and each list's
strings as indexes into the table.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import fields
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from durable import TEMP_SUFFIX, atomic_write
from kg import axes_file, heap, saved_codes, table_file
from kg.edge_lists import ChunkIndex
from kg.file_matrix import FileMatrix
from kg.graph_file import GRAPH_DB_FILE, Vectors
from kg.index import EDGE_LISTS, INDEXED_LISTS, GraphSnapshot
from kg.int8_rows import Int8Rows
from kg.lead_rows import Codes, LeadRows, fit_rotation
from kg.npz_file import JsonBytes, NpyWriter, read_json, write_npz
from kg.numbering import INDEX
from kg.rotation import Rotation
from kg.saved_strings import StringIndexes
from kg.saved_vectors import VECTOR_FILE, FileRows, write_vectors
from kg.snapshot_lists import take
from kg.vector_rows import VectorRows

log = logging.getLogger(__name__)

FILE = "snapshot.npz"
#: Bumped when the saved fields change: an older file is ignored, not misread.
FORMAT = 7
#: Format 6 saved the table of strings, and each edge's text, in the JSON
#: (``kg.table_file``); format 5 also the entities' vectors in node order, without
#: ``node_rows``; format 4 also each list's strings in the JSON, and no codes. All three
#: are read, and saved again as ``FORMAT`` at the next stop (a start from the rows
#: instead took 231 s at 1M chunks).
_JSON_TABLE = 6
_NODE_ORDER = 5
_OLDER = 4
_GRAPH_FILES = (GRAPH_DB_FILE, f"{GRAPH_DB_FILE}-wal")
_ARRAYS = (
    "edge_subject",
    "edge_object",
    "edge_predicate_id",
    "edge_position",
    "edge_group",
    "adjacency_ptr",
    "adjacency_edges",
)
_STRINGS = ("node_keys", "node_names", "predicate_keys", *EDGE_LISTS)
# Each list of strings is saved as indexes into one table of its strings
# (``kg.saved_strings``), the table in files of its own (``kg.table_file``).
assert set(INDEXED_LISTS) == set(_STRINGS)
# Vectors are saved as matrices of their own, with each node's and each edge's row (the
# triple texts' once per text).
_VECTORS = {"node_vectors", "edge_vectors"}
_DERIVED = {"chunks", "strings"}
assert {f.name for f in fields(GraphSnapshot)} == {*_ARRAYS, *_STRINGS, *_VECTORS, *_DERIVED}


def discard(folder: Path) -> None:
    """Remove the saved snapshot: called before any write to the graph's file. Its
    vector files stay, named by no snapshot, until the next save (which grows them in
    place: ``kg.saved_vectors``) or a start from the rows removes them."""
    (folder / FILE).unlink(missing_ok=True)


def remove(folder: Path) -> None:
    """Remove the saved snapshot and every vector file, as a start after a crash leaves
    the folder once it has read the rows (nothing may map the files: a benchmark's folder
    made to start as after a crash)."""
    discard(folder)
    remove_vector_files(folder, keep=None)


def remove_vector_files(folder: Path, keep: str | None) -> None:
    """Remove the vector files in ``folder`` but those of snapshot ``keep`` (None: all)."""
    for path in folder.glob(VECTOR_FILE.format(id="*", kind="*")):
        if keep is None or not path.name.startswith(f"snapshot-{keep}-"):
            path.unlink(missing_ok=True)


def _file_state(folder: Path, names: tuple[str, ...] = _GRAPH_FILES) -> list[list[int] | None]:
    """Size and modification time of the graph's file and its write-ahead log (of
    ``names`` in ``folder``)."""
    state: list[list[int] | None] = []
    for name in names:
        try:
            stat = (folder / name).stat()
        except FileNotFoundError:
            state.append(None)
        else:
            state.append([stat.st_size, stat.st_mtime_ns])
    return state


def depends_on(folder: Path) -> list[list[int] | None]:
    """The state of what a saved snapshot depends on besides its own files: the graph's
    file and write-ahead log, and the entity axes' file its codes were made by. Where a
    start read the snapshot back and this is unchanged at the stop (and no write removed
    the snapshot), the snapshot on the disk is what a save would write."""
    return _file_state(folder, (*_GRAPH_FILES, axes_file.FILE))


@heap.collector_paused()
def save(folder: Path, snapshot: GraphSnapshot, versions: dict[str, str]) -> None:
    """Save ``snapshot`` and the document ``versions`` it reflects (a clean close, the
    graph's file closed first: its state is recorded, and a file changed by anything but
    the graph, which ``discard`` would not see, makes the snapshot stale).

    Without the cyclic collector: encoding the versions (a million documents at
    1,000,000 chunks) makes a tuple per document, and the collections those started
    took 5.1 s of a 10.1 s save on a 2-core EPYC."""
    snapshot_id = uuid.uuid4().hex[:16]
    try:
        may_grow = not (folder / FILE).exists()  # no snapshot names the files
        strings = _strings_to_save(snapshot, may_grow)
        table = table_file.write(
            strings.table,
            partial(_file_path, folder),
            snapshot_id,
            strings.saved if may_grow else None,
        )
        nodes = write_vectors(folder, snapshot.node_vectors, snapshot_id, "nodes", may_grow)
        edges = write_vectors(folder, snapshot.edge_vectors, snapshot_id, "triples", may_grow)
        codes = saved_codes.save(
            snapshot.node_vectors.matrix,
            nodes.source,
            partial(_code_path, folder),
            snapshot_id,
            grown_from=nodes.grown_from,
        )
    except BaseException:
        remove_vector_files(folder, keep=None)
        raise
    entries = _entries(folder, snapshot, versions, strings, table, nodes.item_rows, edges, codes)
    try:
        atomic_write(folder / FILE, partial(write_npz, entries))
    except BaseException:
        remove_vector_files(folder, keep=None)
        raise
    remove_vector_files(folder, keep=snapshot_id)


def _entries(
    folder: Path,
    snapshot: GraphSnapshot,
    versions: dict[str, str],
    strings: StringIndexes,
    table: table_file.SavedTable,
    node_rows: np.ndarray,
    edges: FileRows,
    codes: dict[str, np.ndarray],
) -> Iterator[tuple[str, np.ndarray | NpyWriter]]:
    """``snapshot.npz``'s arrays, each made as it is written (``kg.npz_file``). The
    table of strings is in its own files (``kg.table_file``); the JSON holds the
    versions and where the table ends."""
    meta = {
        "format": FORMAT,
        "id": table.snapshot_id,
        "file": _file_state(folder),
        "versions": versions,
        "table": [table.count, table.size],
    }
    yield "meta", JsonBytes(meta)
    for name in _ARRAYS:
        yield name, np.ascontiguousarray(getattr(snapshot, name))
    yield "edge_rows", edges.item_rows.astype(INDEX)
    yield "node_rows", node_rows.astype(INDEX)
    yield "string_nones", np.array(table.nones, np.int64)
    for name, index in strings.indexes.items():
        yield f"{name}_strings", index
    yield from codes.items()


def load(
    folder: Path, axes: Rotation | None = None
) -> tuple[GraphSnapshot, dict[str, str], bool] | None:
    """The saved snapshot, versions, and whether it is of the current format (else a
    stop should save it again), or None (none saved, another format, damaged). Its
    vectors are mapped from their files, read-only; the entities' codes turned by
    ``axes`` where given (``kg.axes_file``)."""
    for leftover in [*folder.glob(f".*{TEMP_SUFFIX}"), *folder.glob(".snapshot-*.npz")]:
        if leftover.name.startswith((f".{FILE}.", ".snapshot-")):  # a save a crash cut short
            leftover.unlink(missing_ok=True)
    path = folder / FILE
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            meta = read_json(saved, "meta")
            if meta.get("format") not in (FORMAT, _JSON_TABLE, _NODE_ORDER, _OLDER):
                log.warning(
                    "knowledge graph: ignoring the saved snapshot %s (format %s)",
                    path,
                    meta.get("format"),
                )
                return None
            if meta.get("file") != _file_state(folder):
                return None
            arrays = {name: saved[name] for name in _ARRAYS}
            edge_rows = saved["edge_rows"]
            strings = _saved_strings(folder, meta, saved)
            nodes = mapped(folder, meta["id"], "nodes")
            node_rows = (
                saved["node_rows"] if meta["format"] >= _JSON_TABLE else np.arange(len(nodes))
            )
            rotation = fit_rotation(nodes, axes)
            codes: Codes | None = saved_codes.read(
                saved, rotation, len(nodes), partial(_code_path, folder), meta["id"]
            )
        # Coded here where none were saved, not when the first change gives the tables
        # their vectors: until then each chat's entity link would scan the float32 rows
        # (at 2.1 million entities 144 ms and 3.2 GB of pages, against 41 ms from the codes).
        if codes is None:
            codes = Int8Rows.of(nodes) if rotation is None else LeadRows.of(nodes, rotation)
        node_vectors = VectorRows.stacked(nodes, codes, node_rows.astype(INDEX))
        edge_vectors = VectorRows(mapped(folder, meta["id"], "triples"), edge_rows)
        if len(node_vectors) != len(strings.indexes["node_keys"]) or any(
            rows.size and (int(rows.max()) >= len(vectors.matrix) or int(rows.min()) < 0)
            for rows, vectors in ((node_rows, node_vectors), (edge_rows, edge_vectors))
        ):
            raise ValueError("the vector files do not match the snapshot")
        strings.check()
    except (OSError, ValueError, KeyError) as exc:
        log.warning("knowledge graph: ignoring the saved snapshot %s (%s)", path, exc)
        return None
    _one_text_per_row(strings.indexes["edge_text"], edge_rows)
    lists: dict[str, Any] = strings.columns()
    doc, chunk = strings.indexes["edge_doc"], strings.indexes["edge_chunk"]
    snapshot = GraphSnapshot(
        node_vectors=node_vectors,
        edge_vectors=edge_vectors,
        chunks=ChunkIndex.of_indexes(doc, chunk, strings.table),
        strings=strings,
        **lists,
        **arrays,
    )
    return snapshot, dict(meta["versions"]), meta["format"] == FORMAT


def _saved_strings(
    folder: Path, meta: dict[str, Any], saved: np.lib.npyio.NpzFile
) -> StringIndexes:
    """The lists' strings ``load`` reads: the table from its files (``kg.table_file``),
    or from the JSON of an older format, and each list's indexes into it."""
    if meta["format"] == _OLDER:
        lists = {name: meta[name] for name in INDEXED_LISTS}
        return StringIndexes.of(lists, distinct=("edge_text",))
    if meta["format"] != FORMAT:  # the edges' texts in the JSON, as they are
        indexes = {name: saved[f"{name}_strings"] for name in INDEXED_LISTS if name != "edge_text"}
        table = list(meta["strings"])
        texts = meta["edge_text"]
        indexes["edge_text"] = np.arange(len(table), len(table) + len(texts), dtype=INDEX)
        table.extend(texts)
        return StringIndexes(table, indexes, len(table))
    count, size = (int(n) for n in meta["table"])
    nones = tuple(saved["string_nones"].tolist())
    table_saved = table_file.SavedTable(meta["id"], count, size, nones)
    table = table_file.read(partial(_file_path, folder), table_saved)
    indexes = {name: saved[f"{name}_strings"] for name in INDEXED_LISTS}
    return StringIndexes(table, indexes, len(table), table_saved)


def _strings_to_save(snapshot: GraphSnapshot, may_grow: bool) -> StringIndexes:
    """The table of strings to save and each list's indexes into it: the snapshot's own,
    where it kept them and they match its lists (as they are where ``may_grow`` and
    they grew from a saved table, else compacted); else each string looked up (after a
    start from the rows: 15 s at 1,000,000 chunks, where the kept ones take 1-2 s;
    ``kg.saved_strings``)."""
    lists = {name: getattr(snapshot, name) for name in INDEXED_LISTS}
    kept = snapshot.strings
    if kept is not None and kept.matches(lists, np.random.default_rng()):
        return kept if may_grow and kept.saved is not None else kept.deduplicated()
    if kept is not None:
        log.warning("knowledge graph: the snapshot's string indexes do not match; looked up")
    return StringIndexes.of(lists, distinct=("edge_text",))  # each string used


def _one_text_per_row(texts: np.ndarray, rows: np.ndarray) -> None:
    """Point the texts of edges that share a vector row (state the same text) at one
    string of the table, in place: the triple table keeps one per row
    (``table_vectors``), and a save then writes each such text once. Few edges repeat a
    text (215 of 323,542 in the bench's graph), so only those are found, from the rows;
    no dict of every text is made (3.2 million at 1,000,000 chunks)."""
    order = np.argsort(rows, kind="stable")
    ranked = rows[order]
    for i in (np.flatnonzero(ranked[1:] == ranked[:-1]) + 1).tolist():
        texts[order[i]] = texts[order[i - 1]]


def _code_path(folder: Path, snapshot_id: str, name: str) -> Path:
    """The file of the entities' codes array ``name`` of a snapshot (``kg.saved_codes``):
    one of its vector files, as ``VECTOR_FILE`` names them."""
    return _file_path(folder, snapshot_id, f"codes-{name}")


def _file_path(folder: Path, snapshot_id: str, kind: str) -> Path:
    """A file of a snapshot beside ``snapshot.npz``, as ``VECTOR_FILE`` names them (its
    vector files, its entities' codes, its table of strings)."""
    return folder / VECTOR_FILE.format(id=snapshot_id, kind=kind)


def mapped(folder: Path, snapshot_id: str, kind: str) -> FileMatrix:
    """A vector file of the snapshot, mapped read-only (float32 rows); the rows a query
    asks for are read from the file, not through the mapping (``kg.file_matrix``)."""
    return FileMatrix.open(folder / VECTOR_FILE.format(id=snapshot_id, kind=kind))


def table_vectors(snapshot: GraphSnapshot) -> tuple[Vectors, Vectors]:
    """The node and triple-text vectors of a snapshot ``load`` read back, as the files'
    rows hold them: the graph's embedding tables adopt these mapped matrices instead of
    reading the same vectors again from the file (780 MiB at 323,000 triples). Each key
    with its row, ascending; a grown file's rows no key names (``kg.saved_vectors``) are
    left out of the rows."""
    nodes, triples = snapshot.node_vectors.matrix, snapshot.edge_vectors.matrix
    assert isinstance(nodes.tail, np.ndarray) and isinstance(triples.tail, np.ndarray)
    order = np.argsort(snapshot.node_vectors.rows, kind="stable")
    node_rows = snapshot.node_vectors.rows[order].astype(np.int64)
    node_keys = take(snapshot.node_keys, order)
    used, first = np.unique(snapshot.edge_vectors.rows, return_index=True)
    texts = take(snapshot.edge_text, first)
    codes = nodes.codes[1] if nodes.codes else None
    return (
        Vectors(node_keys, nodes.tail, codes, rows=_unless_every(node_rows, len(nodes.tail))),
        Vectors(texts, triples.tail, rows=_unless_every(used.astype(np.int64), len(triples.tail))),
    )


def _unless_every(rows: np.ndarray, count: int) -> np.ndarray | None:
    """``rows`` (ascending, distinct), or None where they are all ``count`` rows."""
    return None if len(rows) == count else rows
