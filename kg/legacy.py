"""Reads a graph folder of the layout before ``graph.sqlite3``: node-link ``graph.json``
(an edge's ends named "subject" and "object", its key "<doc_id>#<position>") and the
embeddings in ``node_embeddings.npz`` and ``triple_embeddings.npz`` (arrays "keys" and
"vectors", no pickle). Only the move into the SQLite file reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from kg.graph_file import (
    LEGACY_GRAPH_FILE,
    LEGACY_NODE_VECTORS_FILE,
    LEGACY_TRIPLE_VECTORS_FILE,
    GraphRows,
    Vectors,
)
from kg.models import EdgeRow

LEGACY_FORMAT_VERSION = 1
_LINK_ENDS = {"source": "subject", "target": "object"}


def read_legacy_folder(folder: Path) -> GraphRows:
    """The rows of an old-layout folder (its versions are read by the caller)."""
    path = folder / LEGACY_GRAPH_FILE
    payload: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if payload.get("format") != LEGACY_FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported graph format {payload.get('format')!r}")
    graph = nx.node_link_graph(
        payload["graph"], directed=True, multigraph=True, edges="edges", **_LINK_ENDS
    )
    edges = [
        EdgeRow.from_attributes(u, v, key, data)
        for u, v, key, data in graph.edges(keys=True, data=True)
    ]
    nodes = {str(key): str(data.get("name", key)) for key, data in graph.nodes(data=True)}
    return GraphRows(
        edges=edges,
        nodes=nodes,
        node_vectors=_read_npz(folder / LEGACY_NODE_VECTORS_FILE),
        triple_vectors=_read_npz(folder / LEGACY_TRIPLE_VECTORS_FILE),
    )


def _read_npz(path: Path) -> Vectors:
    """A missing file (a crash lost it) reads as no vectors: the graph re-embeds them."""
    if not path.exists():
        return Vectors()
    with np.load(path, allow_pickle=False) as data:
        keys = [str(k) for k in data["keys"]]
        vectors = np.asarray(data["vectors"], dtype=np.float32)
    return Vectors(keys, vectors) if keys else Vectors()
