"""The graph's read-side index, saved when the graph closes cleanly, read back at the
next start instead of being rebuilt from every row.

A start that builds the ``GraphSnapshot`` from ``graph.sqlite3`` reads every edge and
vector row and sorts them: 17.5-20 s at 323,000 triples, most of a 37 s start with
100,000 chunks. Loading the saved arrays is a file read.

It is never stale: every write to the graph's file removes it first (``discard``), so
it exists only while the file is as it was when the snapshot was saved. A crash at any
point leaves it either whole and current, or absent (written beside and renamed into
place); absent, or unreadable, a start builds from the rows as before.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from kg.edge_lists import ChunkIndex
from kg.embeddings import VectorRows
from kg.graph_file import GRAPH_DB_FILE, Vectors
from kg.index import EDGE_LISTS, GraphSnapshot
from kg.models import shared

log = logging.getLogger(__name__)

FILE = "snapshot.npz"
#: Bumped when the saved fields change: an older file is ignored, not misread.
FORMAT = 2
_ARRAYS = (
    "edge_subject",
    "edge_object",
    "edge_predicate_id",
    "edge_group",
    "adjacency_ptr",
    "adjacency_edges",
)
_STRINGS = ("node_keys", "node_names", "predicate_keys", *EDGE_LISTS)
#: Lists whose strings are (nearly) all different: the others' are shared (``shared``).
_UNIQUE = {"edge_key", "edge_text"}
# Vectors are saved as matrices of their own: the nodes' in node order, the triple
# texts' once per text with each edge's row.
_VECTORS = {"node_vectors", "edge_vectors"}
_DERIVED = {"node_index", "chunks"}
assert {f.name for f in fields(GraphSnapshot)} == {*_ARRAYS, *_STRINGS, *_VECTORS, *_DERIVED}


def _shared(value: str | None) -> str | None:
    return None if value is None else shared(value)


def discard(folder: Path) -> None:
    """Remove the saved snapshot: called before any write to the graph's file."""
    (folder / FILE).unlink(missing_ok=True)


def _file_state(folder: Path) -> list[list[int] | None]:
    """Size and modification time of the graph's file and its write-ahead log."""
    state: list[list[int] | None] = []
    for name in (GRAPH_DB_FILE, f"{GRAPH_DB_FILE}-wal"):
        try:
            stat = (folder / name).stat()
        except FileNotFoundError:
            state.append(None)
        else:
            state.append([stat.st_size, stat.st_mtime_ns])
    return state


def save(folder: Path, snapshot: GraphSnapshot, versions: dict[str, str]) -> None:
    """Save ``snapshot`` and the document ``versions`` it reflects (a clean close, the
    graph's file closed first: its state is recorded, and a file changed by anything but
    the graph, which ``discard`` would not see, makes the snapshot stale)."""
    strings = {name: getattr(snapshot, name) for name in _STRINGS}
    meta = json.dumps(
        {"format": FORMAT, "file": _file_state(folder), "versions": versions, **strings}
    ).encode()
    arrays: dict[str, Any] = {n: np.ascontiguousarray(getattr(snapshot, n)) for n in _ARRAYS}
    arrays["node_vectors"] = np.asarray(snapshot.node_vectors)
    used, arrays["edge_rows"] = np.unique(snapshot.edge_vectors.rows, return_inverse=True)
    arrays["edge_vectors"] = snapshot.edge_vectors.matrix[used]
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".snapshot-", suffix=".npz")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, meta=np.frombuffer(meta, np.uint8), **arrays)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, folder / FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(folder: Path) -> tuple[GraphSnapshot, dict[str, str]] | None:
    """The saved snapshot and versions, or None (none saved, another format, damaged)."""
    for leftover in folder.glob(".snapshot-*.npz"):  # a save a crash interrupted
        leftover.unlink(missing_ok=True)
    path = folder / FILE
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as saved:
            meta = json.loads(saved["meta"].tobytes())
            if meta.get("format") != FORMAT:
                log.warning(
                    "knowledge graph: ignoring the saved snapshot %s (format %s)",
                    path,
                    meta.get("format"),
                )
                return None
            if meta.get("file") != _file_state(folder):
                return None
            arrays = {name: saved[name] for name in _ARRAYS}
            node_vectors = VectorRows.stacked(saved["node_vectors"])
            edge_vectors = VectorRows(saved["edge_vectors"], saved["edge_rows"])
    except (OSError, ValueError, KeyError) as exc:
        log.warning("knowledge graph: ignoring the saved snapshot %s (%s)", path, exc)
        return None
    strings: dict[str, Any] = {
        name: meta[name] if name in _UNIQUE else [_shared(s) for s in meta[name]]
        for name in _STRINGS
    }
    snapshot = GraphSnapshot(
        node_index={key: i for i, key in enumerate(strings["node_keys"])},
        node_vectors=node_vectors,
        edge_vectors=edge_vectors,
        chunks=ChunkIndex.of(strings["edge_doc"], strings["edge_chunk"]),
        **strings,
        **arrays,
    )
    return snapshot, dict(meta["versions"])


def table_vectors(snapshot: GraphSnapshot) -> tuple[Vectors, Vectors]:
    """The node and triple-text vectors of a snapshot ``load`` read back, as the file's
    rows hold them: the graph's embedding tables adopt these matrices instead of
    reading the same vectors again from the file (780 MiB at 323,000 triples)."""
    texts = [""] * len(snapshot.edge_vectors.matrix)
    for text, row in zip(snapshot.edge_text, snapshot.edge_vectors.rows.tolist(), strict=True):
        texts[row] = text
    return (
        Vectors(list(snapshot.node_keys), snapshot.node_vectors.matrix),
        Vectors(texts, snapshot.edge_vectors.matrix),
    )
