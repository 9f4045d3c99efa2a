"""Where the chunks' vectors live: one small interface over each kind of store.

``KnowledgeBase`` adds, deletes, searches and scans chunks through ``VectorIndex`` and
never learns which store answers:

- ``EdgeIndex`` (``rag.knowledge.edge``), the embedded default: a Qdrant Edge shard in
  the data folder, HNSW in-process (2.2 ms at 100k chunks where Qdrant local mode took
  383 ms: ``bench/embedded_index.py``);
- ``QdrantIndex``: a collection through ``qdrant-client``, on a Qdrant server (the
  shared mode of ``rag.knowledge.shared_commit``) or, where an operator asks for it,
  Qdrant local mode in the data folder (brute force; the default before Edge).

Both store a chunk as llama-index's Qdrant integration does (the node's id, its
embedding, ``node_to_metadata_dict`` as payload), so a point means the same in either
and moving a collection from one to the other copies points as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import VectorStoreQuery
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient
from qdrant_client import models as qm

Payload = dict[str, Any]


@dataclass(frozen=True)
class Hit:
    """One search result: the chunk as a node, and its cosine similarity."""

    node: BaseNode
    score: float


def payload_of(node: BaseNode) -> Payload:
    """A chunk's payload, as llama-index's Qdrant integration writes it."""
    return node_to_metadata_dict(node, remove_text=False, flat_metadata=False)


def node_of(payload: Payload) -> BaseNode:
    return metadata_dict_to_node(payload)


class VectorIndex(Protocol):
    """The operations the knowledge base needs of a vector store."""

    def open(self) -> None:
        """Connect or load (all I/O happens here, none in the constructor)."""

    def exists(self) -> bool:
        """Whether the collection exists (before the first write it may not)."""

    def add(self, nodes: Sequence[BaseNode]) -> None:
        """Store embedded chunks, durably before it returns."""

    def delete(self, point_ids: Sequence[str]) -> None: ...

    def search(self, embedding: Sequence[float], top_k: int, where: qm.Filter | None) -> list[Hit]:
        """Nearest chunks, best first; ``where`` only on a server (see ``visible``)."""

    def payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, Payload]]:
        """(point id, those payload keys) of every point, in pages."""

    def count(self, where: qm.Filter | None) -> int: ...

    def optimize(self) -> None:
        """Index what the last writes added, where the store does that on request."""

    def close(self) -> None: ...


class QdrantIndex:
    """A collection through ``qdrant-client``: a server, or local mode on a folder."""

    def __init__(
        self,
        client: QdrantClient | None,
        collection: str,
        connect: Callable[[], QdrantClient] | None = None,
    ) -> None:
        """``client``, or ``connect``: a factory called by ``open`` (tests stand a
        client in for a server by it)."""
        self._client = client
        self._connect = connect
        self.collection = collection
        self._store: QdrantVectorStore | None = None

    def open(self) -> None:
        if self._client is None:
            if self._connect is None:
                raise ValueError("a QdrantIndex needs a client or a way to connect")
            self._client = self._connect()
        self._store = QdrantVectorStore(collection_name=self.collection, client=self._client)

    @property
    def client(self) -> QdrantClient:
        if self._client is None:
            raise RuntimeError("the vector index is not open yet")
        return self._client

    @property
    def _vectors(self) -> QdrantVectorStore:
        if self._store is None:
            raise RuntimeError("the vector index is not open yet")
        return self._store

    def exists(self) -> bool:
        return bool(self.client.collection_exists(self.collection))

    def add(self, nodes: Sequence[BaseNode]) -> None:
        self._vectors.add(list(nodes))

    def delete(self, point_ids: Sequence[str]) -> None:
        self._vectors.delete_nodes(list(point_ids))

    def search(self, embedding: Sequence[float], top_k: int, where: qm.Filter | None) -> list[Hit]:
        result = self._vectors.query(
            VectorStoreQuery(query_embedding=list(embedding), similarity_top_k=top_k),
            qdrant_filters=where,
        )
        return [
            Hit(node, float(score))
            for node, score in zip(result.nodes or [], result.similarities or [], strict=False)
        ]

    def payloads(self, keys: Sequence[str]) -> Iterator[tuple[str, Payload]]:
        offset = None
        while True:
            points, offset = self.client.scroll(
                self.collection,
                with_payload=list(keys),
                with_vectors=False,
                limit=1024,
                offset=offset,
            )
            for p in points:
                yield str(p.id), dict(p.payload or {})
            if offset is None:
                return

    def count(self, where: qm.Filter | None) -> int:
        return int(self.client.count(self.collection, count_filter=where, exact=True).count)

    def optimize(self) -> None:
        """A server indexes in its own background threads; local mode has no index."""

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
