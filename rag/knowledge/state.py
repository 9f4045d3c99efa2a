"""What the knowledge base knows of its documents: a llama-index docstore (each
document's content hash and chunks), the triples callers supplied, and the KB version.

All of it lives in one SQLite file (``kb.sqlite3``, through ``SqliteKVStore``), and a
write changes only its own rows. In the embedded default the commit of a write's
transaction (``save``) is the commit point. On a shared Qdrant collection the
committed points are the truth and this state is rebuilt from them
(``replace_from_scan``); the file is a cache.

A data folder from before keeps its state in ``docstore.json``, rewritten whole on every
write; ``open`` moves it into SQLite once (``migrate_json``) and keeps the old file as
``docstore.json.migrated``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core import Document
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.keyval_docstore import (
    DEFAULT_METADATA_COLLECTION_SUFFIX,
    DEFAULT_NAMESPACE,
    DEFAULT_REF_DOC_COLLECTION_SUFFIX,
    KVDocumentStore,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from rag.knowledge.collection import CollectionScan
from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.kvstore import SqliteKVStore

log = logging.getLogger(__name__)

Triples = dict[str, list[list[str]]]
STATE_FILE = "kb.sqlite3"
LEGACY_FILE = "docstore.json"
#: warmrag's own collections beside llama-index's ("docstore/data", ...).
META, TRIPLES, LOOSE = "warmrag/meta", "warmrag/triples", "warmrag/loose"
#: The docstore's collection of documents (each with its chunks' ids), by document id.
REF_DOCS = f"{DEFAULT_NAMESPACE}{DEFAULT_REF_DOC_COLLECTION_SUFFIX}"
#: The docstore's collection of each document's and chunk's hash, by id.
METADATA = f"{DEFAULT_NAMESPACE}{DEFAULT_METADATA_COLLECTION_SUFFIX}"


class EmbeddingMismatchError(RuntimeError):
    """The knowledge base's vectors come from another embedding model or runtime."""


class KBState:
    """The docstore, the supplied triples and the KB version, over one ``SqliteKVStore``.

    Changes join one transaction until ``save`` commits them or ``rollback`` forgets
    them; reads in between see them (the knowledge base holds its lock throughout)."""

    def __init__(self, kv: SqliteKVStore | None = None) -> None:
        """``kv``: the store (an empty in-memory one before the knowledge base opens)."""
        self.kv = kv or SqliteKVStore(":memory:")
        self.docstore = KVDocumentStore(self.kv)
        self._version = self._read_version()
        self._documents: int | None = None  # counted at the first ask after each write

    @classmethod
    def open(cls, folder: Path) -> KBState:
        """The state in ``folder``, moved from a ``docstore.json`` there first if needed."""
        path, legacy = folder / STATE_FILE, folder / LEGACY_FILE
        if not path.exists() and legacy.exists():
            migrate_json(legacy, path)
        return cls(SqliteKVStore(path))

    def close(self) -> None:
        self.kv.close()

    # ----- version ------------------------------------------------------------

    def _read_version(self) -> int:
        stored = self.kv.get("kb_version", collection=META)
        return int(stored["value"]) if stored else 0

    @property
    def version(self) -> int:
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self.kv.put("kb_version", {"value": value}, collection=META)
        self._version = value

    # ----- transaction --------------------------------------------------------

    def save(self) -> None:
        """Commit every change since the last save: the embedded commit point."""
        self.kv.commit()

    @property
    def pending(self) -> bool:
        """Changes made since the last save."""
        return self.kv.pending

    def rollback(self) -> None:
        """Back to the last save."""
        self.kv.rollback()
        self._version = self._read_version()
        self._documents = None

    def recorded_embedding(self) -> str | None:
        """The identity of the embedder this knowledge base was built with, if recorded."""
        recorded = self.kv.get("embedding", collection=META)
        return None if recorded is None else str(recorded["value"])

    def check_embedding(self, identity: str) -> None:
        """Record the embedder a new (or older) knowledge base is built with, or refuse
        one built with another: its stored vectors would not match the questions'."""
        recorded = self.recorded_embedding()
        if recorded is None:
            self.kv.put("embedding", {"value": identity}, collection=META)
            try:
                self.save()
            except OSError:  # a full disk must not stop a start: recorded next time
                self.rollback()
            return
        if recorded != identity:
            raise EmbeddingMismatchError(
                f"this knowledge base was embedded with {recorded}, and this service "
                f"embeds with {identity}: unset WARMRAG_EMBEDDING_PRECISION to embed as "
                "it was, or re-ingest the documents into a new data folder"
            )

    # ----- reads ----------------------------------------------------------------

    def document_ids(self) -> list[str]:
        """Sorted, read from the keys alone (``document_count`` counts without them)."""
        return self.kv.keys(REF_DOCS)

    def document_count(self) -> int:
        """How many documents are current, counted once after each write that can change
        it: ``/ready`` and the metrics ask on every probe, and listing the ids took
        150-300 ms at 1,000,000 chunks (333,000 documents), on the event loop."""
        if self._documents is None:
            self._documents = self.kv.count(REF_DOCS)
        return self._documents

    def hashes(self) -> dict[str, str | None]:
        """Each document's hash, by id (sorted), in one read: what
        ``docstore.get_document_hash`` gives each."""
        found = self.kv.field_by_key(REF_DOCS, METADATA, "doc_hash")
        return {d: h if isinstance(h, str) else None for d, h in found.items()}

    def supplied_triples(self, doc_id: str) -> list[list[str]]:
        stored = self.kv.get(doc_id, collection=TRIPLES)
        return [list(t) for t in stored["triples"]] if stored else []

    def owns(self, chunk_id: str) -> bool:
        """Whether a committed document version has this chunk."""
        return bool(self.docstore.document_exists(chunk_id))

    # ----- loose chunks: what a write may leave in the index, so that a start checks
    # those alone instead of reading every point back ------------------------------

    @property
    def logs_loose(self) -> bool:
        """Whether this state has logged loose chunks since it was made (a folder from
        before the log, or moved from local mode, has not: its first start scans)."""
        return self.kv.get("loose_log", collection=META) is not None

    def start_loose_log(self) -> None:
        self.kv.put("loose_log", {"value": True}, collection=META)

    def mark_loose(self, chunk_ids: Sequence[str]) -> None:
        """Chunks that may be in the index with no committed document owning them."""
        self.kv.put_all([(c, {}) for c in chunk_ids], collection=LOOSE)

    def loose(self) -> list[str]:
        return self.kv.keys(LOOSE)

    def settle(self, chunk_ids: Sequence[str]) -> None:
        """These chunks are owned, or gone from the index: no longer loose."""
        self.kv.delete_all(list(chunk_ids), collection=LOOSE)

    def orphans(self, points: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
        """Of these (point id, payload) pairs, the points no committed document version
        owns (what an interrupted embedded write left)."""
        stale: list[str] = []
        for point_id, payload in points:
            current = self.docstore.get_document_hash(str(payload.get("doc_id")))
            if current is None or current != payload.get(DOC_HASH_KEY):
                stale.append(point_id)
        return stale

    # ----- writes (in the open transaction) -------------------------------------

    def put(self, docs: Sequence[Document], nodes: Sequence[BaseNode], triples: Triples) -> None:
        """Make these document versions (their hashes, chunks and supplied triples)
        current in place of any earlier ones."""
        self._documents = None
        for doc in docs:
            self.docstore.delete_ref_doc(doc.id_, raise_error=False)
            self.docstore.set_document_hash(doc.id_, doc.metadata[DOC_HASH_KEY])
        # Vectors live in the vector index; the docstore keeps the text only.
        self.docstore.add_documents(
            [n.model_copy(update={"embedding": None}) for n in nodes], store_text=True
        )
        for doc_id, doc_triples in triples.items():
            if doc_triples:
                self.kv.put(doc_id, {"triples": doc_triples}, collection=TRIPLES)
            else:
                self.kv.delete(doc_id, collection=TRIPLES)

    def forget(self, doc_id: str) -> None:
        """Drop a document: its chunks, its hash and its supplied triples."""
        self._documents = None
        self.docstore.delete_ref_doc(doc_id, raise_error=False)
        self.docstore.delete_document(doc_id, raise_error=False)
        # The docstore has no public "forget this hash"; an absent hash is how upsert
        # recognises a new document.
        self.kv.delete(doc_id, collection=self.docstore._metadata_collection)
        self.kv.delete(doc_id, collection=TRIPLES)

    def replace_from_scan(self, found: CollectionScan) -> None:
        """Everything replaced by what a shared collection's committed points describe
        (the version kept)."""
        self._documents = None
        version = self.version
        self.kv.clear()
        self.version = version
        for doc_id, current in found.current.items():
            nodes = [metadata_dict_to_node(p) for p in current.payloads]
            self.docstore.add_documents(nodes, store_text=True)
            self.docstore.set_document_hash(doc_id, current.doc_hash)
            if current.triples:
                self.kv.put(doc_id, {"triples": current.triples}, collection=TRIPLES)


def migrate_json(legacy: Path, path: Path) -> None:
    """Copy a ``docstore.json`` (llama-index's ``SimpleDocumentStore`` collections, the
    version and the triples) into a new SQLite file, once.

    The file is built beside ``path`` and renamed into place when complete, so a crash
    part-way leaves the JSON file as the state and the next open starts again."""
    saved = json.loads(legacy.read_text(encoding="utf-8"))
    partial = path.with_name(path.name + ".partial")
    for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
        leftover.unlink(missing_ok=True)
    kv = SqliteKVStore(partial)
    try:
        for collection, items in dict(saved["docstore"]).items():
            kv.put_all(list(items.items()), collection=collection)
        for doc_id, doc_triples in dict(saved.get("triples", {})).items():
            kv.put(doc_id, {"triples": doc_triples}, collection=TRIPLES)
        kv.put("kb_version", {"value": int(saved["kb_version"])}, collection=META)
        kv.commit()
    finally:
        kv.close()
    os.replace(partial, path)
    legacy.rename(legacy.with_name(legacy.name + ".migrated"))
    log.info("knowledge-base state moved from %s into %s", legacy.name, path.name)
