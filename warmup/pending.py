"""How a knowledge-base change waiting for its detection is written to warmup's store,
and read back (``WarmupStore.add_pending``, ``WarmupStore.load``).

The added chunks' embeddings and the new facts' vectors are left out of a
``ChangeSet``'s JSON by default; detection needs them (a new chunk may enter an entry's
top-k, a new fact its facts). They go in as base64 float32: as JSON numbers, a
50,000-word document's ~400 vectors took ``json.dumps`` 150 ms, holding the GIL (and so
the event loop) all along.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from rag.knowledge.models import ChangeSet, ChunkRecord


def dump_change(change: ChangeSet) -> str:
    body = change.model_dump(mode="json")
    body["added_chunks"] = [
        {"doc_id": c.doc_id, "chunk_id": c.chunk_id, "embedding": _text(c.embedding)}
        for c in change.added_chunks
    ]
    if change.new_facts is not None:  # absent: not known (every fact of its documents)
        body["new_facts"] = [_text(v) for v in change.new_facts]
    return json.dumps(body)


def load_change(body: str) -> ChangeSet:
    raw = json.loads(body)
    chunks = raw.pop("added_chunks", [])
    facts = raw.pop("new_facts", None)
    change = ChangeSet.model_validate(raw)
    if facts is not None:
        change.new_facts = [_vector(v) for v in facts]
    change.added_chunks = [
        ChunkRecord(doc_id=c["doc_id"], chunk_id=c["chunk_id"], embedding=_vector(c["embedding"]))
        for c in chunks
    ]
    return change


def blob(vector: np.ndarray | list[float]) -> bytes:
    """A vector as float32 bytes (query embeddings are stored so too)."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.float32).copy()


def _text(vector: list[float]) -> str:
    return base64.b64encode(blob(vector)).decode()


def _vector(text: str) -> list[float]:
    values: list[float] = array(base64.b64decode(text)).tolist()
    return values
