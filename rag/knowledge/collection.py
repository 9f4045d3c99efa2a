"""A Qdrant collection on a server, shared with other writers: what each point says.

In the embedded default warmrag owns its collection, and the docstore file in its
data folder is the commit point (``rag.knowledge.commit``). On a server the collection
may outlive that folder, or be seen by a second instance, so the state they must
agree on lives with the points themselves:

- every chunk's payload carries its document id and the document's content hash
  (llama-index metadata), and, while a write is under way, ``warmrag_state:
  pending`` with the writer's id;
- the write commits by one ``set_payload`` that turns its points ``committed``
  (with the time); retrieval never sees pending points;
- a start-up rebuilds the local docstore from the committed points, so a fresh or
  lost data folder sees every existing document as it is (unchanged on re-ingest);
- clean-up only removes what this instance itself left half-finished: its own
  pending points, and the older version of a document it replaced. Points it did
  not write, in any shape, are never deleted.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.schema import BaseNode
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from rag.knowledge.ingest import CHUNK_INDEX_KEY, DOC_HASH_KEY
from rag.knowledge.lease import LEASE_KEY

log = logging.getLogger(__name__)

DOC_ID_KEY = "doc_id"  # llama-index's payload key for a chunk's document
STATE_KEY = "warmrag_state"
WRITER_KEY = "warmrag_writer"
COMMITTED_AT_KEY = "warmrag_committed_at"
TRIPLES_KEY = "warmrag_triples"
PENDING = "pending"
COMMITTED = "committed"
#: Keys warmrag's shared mode adds to each chunk (never embedded, never shown to the LLM).
WRITE_KEYS = (STATE_KEY, WRITER_KEY, COMMITTED_AT_KEY, TRIPLES_KEY)


def visible_chunks() -> qm.Filter:
    """Chunks a reader may see: they name a document and are not part of an unfinished write.

    Points without a document id (another application's, the writer's lease) are
    never returned, whatever their vectors."""
    return qm.Filter(
        must_not=[
            qm.IsEmptyCondition(is_empty=qm.PayloadField(key=DOC_ID_KEY)),
            qm.FieldCondition(key=STATE_KEY, match=qm.MatchValue(value=PENDING)),
        ]
    )


def ensure_collection(
    client: QdrantClient, name: str, vector_size: int, *, hnsw_m: int, hnsw_ef_construct: int
) -> bool:
    """Create the collection as llama-index would (one unnamed cosine vector), with the
    operator's HNSW settings and payload indexes on the keys warmrag filters by.

    Returns whether it was created. An existing collection is used as it is."""
    if client.collection_exists(name):
        return False
    client.create_collection(
        name,
        vectors_config=qm.VectorParams(
            size=vector_size,
            distance=qm.Distance.COSINE,
            hnsw_config=qm.HnswConfigDiff(m=hnsw_m, ef_construct=hnsw_ef_construct),
        ),
    )
    for key in (DOC_ID_KEY, STATE_KEY, WRITER_KEY):
        client.create_payload_index(name, key, field_schema=qm.PayloadSchemaType.KEYWORD)
    client.create_payload_index(name, LEASE_KEY, field_schema=qm.PayloadSchemaType.BOOL)
    log.info("created collection %s (HNSW m=%d, ef_construct=%d)", name, hnsw_m, hnsw_ef_construct)
    return True


def mark_pending(
    nodes: Sequence[BaseNode], writer: str, triples: dict[str, list[list[str]]]
) -> None:
    """Tag a write's chunks before they are added: invisible until ``commit``."""
    for node in nodes:
        node.metadata[STATE_KEY] = PENDING
        node.metadata[WRITER_KEY] = writer
        doc_id = node.ref_doc_id or ""
        if node.metadata.get(CHUNK_INDEX_KEY) == 0 and triples.get(doc_id):
            node.metadata[TRIPLES_KEY] = json.dumps(triples[doc_id])
        for key in WRITE_KEYS:
            for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
                if key not in excluded:
                    excluded.append(key)


def commit(client: QdrantClient, name: str, point_ids: Sequence[str]) -> None:
    """The commit point of a write on a server: one operation makes its chunks visible."""
    if point_ids:
        client.set_payload(
            name,
            payload={STATE_KEY: COMMITTED, COMMITTED_AT_KEY: time.time()},
            points=list(point_ids),
        )


@dataclass(frozen=True)
class SharedCollection:
    """How this instance writes a collection on a server (``None`` in the embedded default)."""

    #: Stable per data folder (whose pending points are whose); None: read from (or
    #: created in) the data folder's ``writer_id`` file at open.
    writer_id: str | None
    writer_name: str  # for people: host:pid or the operator's instance name
    hnsw_m: int = 16
    hnsw_ef_construct: int = 100
    lease_ttl_s: float = 60.0


@dataclass
class DocVersion:
    """One version (content hash) of a document, as its committed chunks describe it."""

    doc_id: str
    doc_hash: str
    committed_at: float
    writer: str | None
    point_ids: list[str] = field(default_factory=list)
    payloads: list[dict[str, Any]] = field(default_factory=list)
    triples: list[list[str]] = field(default_factory=list)


@dataclass
class CollectionScan:
    """What a server collection holds, by document; read at start-up."""

    current: dict[str, DocVersion] = field(default_factory=dict)
    superseded: list[DocVersion] = field(default_factory=list)
    pending_by_writer: dict[str, list[str]] = field(default_factory=dict)
    foreign_points: int = 0  # points without a document id: never touched

    def own_leftovers(self, writer: str) -> list[str]:
        """Point ids this writer left half-done: its pending chunks, and older versions
        of documents whose current version it wrote (the replace it did not finish)."""
        ids = list(self.pending_by_writer.get(writer, []))
        for old in self.superseded:
            newer = self.current.get(old.doc_id)
            if newer is not None and newer.writer == writer:
                ids.extend(old.point_ids)
        return ids


def _scroll(client: QdrantClient, name: str) -> Iterator[qm.Record]:
    offset = None
    while True:
        points, offset = client.scroll(
            name, with_payload=True, with_vectors=False, limit=512, offset=offset
        )
        yield from points
        if offset is None:
            return


def scan(client: QdrantClient, name: str) -> CollectionScan:
    """Group every point by document version; the newest committed version is current."""
    result = CollectionScan()
    if not client.collection_exists(name):
        return result
    versions: dict[tuple[str, str], DocVersion] = {}
    for point in _scroll(client, name):
        payload = point.payload or {}
        doc_id, doc_hash = payload.get(DOC_ID_KEY), payload.get(DOC_HASH_KEY)
        if LEASE_KEY in payload or not isinstance(doc_id, str) or not isinstance(doc_hash, str):
            result.foreign_points += LEASE_KEY not in payload
            continue
        if payload.get(STATE_KEY) == PENDING:
            writer = str(payload.get(WRITER_KEY))
            result.pending_by_writer.setdefault(writer, []).append(str(point.id))
            continue
        version = versions.get((doc_id, doc_hash))
        if version is None:
            version = versions[doc_id, doc_hash] = DocVersion(
                doc_id=doc_id,
                doc_hash=doc_hash,
                committed_at=float(payload.get(COMMITTED_AT_KEY) or 0.0),
                writer=payload.get(WRITER_KEY),
            )
        version.point_ids.append(str(point.id))
        version.payloads.append(payload)
        if payload.get(TRIPLES_KEY):
            version.triples = json.loads(payload[TRIPLES_KEY])
    by_doc: dict[str, list[DocVersion]] = defaultdict(list)
    for version in versions.values():
        by_doc[version.doc_id].append(version)
    for doc_id, candidates in by_doc.items():
        candidates.sort(key=lambda v: v.committed_at, reverse=True)
        result.current[doc_id] = candidates[0]
        result.superseded.extend(candidates[1:])
    return result
