"""What the knowledge base knows of its documents: a llama-index docstore (each
document's content hash and chunks), the triples callers supplied, and the KB version.

In the embedded default ``docstore.json`` holds it and its atomic replacement is the
commit point of every write. On a shared Qdrant collection the committed points are
the truth and this state is rebuilt from them (``from_scan``); the file is a cache.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from llama_index.core import Document
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from qdrant_client import QdrantClient
from qdrant_client.models import ExtendedPointId

from durable import atomic_write
from rag.knowledge.collection import CollectionScan
from rag.knowledge.ingest import DOC_HASH_KEY

Triples = dict[str, list[list[str]]]


@dataclass
class KBState:
    docstore: SimpleDocumentStore = field(default_factory=SimpleDocumentStore)
    version: int = 0
    triples: Triples = field(default_factory=dict)  # callers' own; the graph derives from it

    @classmethod
    def load(cls, path: Path) -> KBState:
        if not path.exists():
            return cls()
        state = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            SimpleDocumentStore.from_dict(state["docstore"]),
            int(state["kb_version"]),
            dict(state.get("triples", {})),
        )

    def save(self, path: Path) -> None:
        state = {
            "kb_version": self.version,
            "docstore": self.docstore.to_dict(),
            "triples": self.triples,
        }
        data = json.dumps(state).encode()
        atomic_write(path, lambda fh: fh.write(data))

    @classmethod
    def from_scan(cls, found: CollectionScan, version: int) -> KBState:
        """The state a shared collection's committed points describe."""
        state = cls(version=version)
        for doc_id, current in found.current.items():
            nodes = [metadata_dict_to_node(p) for p in current.payloads]
            state.docstore.add_documents(nodes, store_text=True)
            state.docstore.set_document_hash(doc_id, current.doc_hash)
            if current.triples:
                state.triples[doc_id] = current.triples
        return state

    def hashes(self) -> dict[str, str | None]:
        return {d: self.docstore.get_document_hash(d) for d in self.document_ids()}

    def document_ids(self) -> list[str]:
        return sorted(self.docstore.get_all_ref_doc_info() or {})

    def orphans(self, client: QdrantClient, collection: str) -> list[ExtendedPointId]:
        """Points of ``collection`` that no committed document version owns (what an
        interrupted embedded write left)."""
        stale: list[ExtendedPointId] = []
        offset = None
        while True:
            points, offset = client.scroll(
                collection,
                with_payload=["doc_id", DOC_HASH_KEY],
                with_vectors=False,
                limit=1024,
                offset=offset,
            )
            for p in points:
                payload = p.payload or {}
                current = self.docstore.get_document_hash(str(payload.get("doc_id")))
                if current is None or current != payload.get(DOC_HASH_KEY):
                    stale.append(p.id)
            if offset is None:
                return stale

    def put(self, docs: Sequence[Document], nodes: Sequence[BaseNode], triples: Triples) -> None:
        """Make these document versions (their hashes, chunks and supplied triples)
        current in place of any earlier ones."""
        for doc in docs:
            self.docstore.delete_ref_doc(doc.id_, raise_error=False)
            self.docstore.set_document_hash(doc.id_, doc.metadata[DOC_HASH_KEY])
        # Vectors live in Qdrant; a copy in the docstore would make every save
        # serialize them all again (the whole file is rewritten on each write).
        self.docstore.add_documents(
            [n.model_copy(update={"embedding": None}) for n in nodes], store_text=True
        )
        for doc_id, doc_triples in triples.items():
            if doc_triples:
                self.triples[doc_id] = doc_triples
            else:
                self.triples.pop(doc_id, None)

    def forget(self, doc_id: str) -> None:
        """Drop a document: its chunks, its hash and its supplied triples."""
        self.docstore.delete_ref_doc(doc_id, raise_error=False)
        self.docstore.delete_document(doc_id, raise_error=False)
        # SimpleDocumentStore has no public "forget this hash"; an absent hash is
        # how upsert recognises a new document.
        kv = self.docstore._kvstore
        kv.delete(doc_id, collection=self.docstore._metadata_collection)
        self.triples.pop(doc_id, None)
