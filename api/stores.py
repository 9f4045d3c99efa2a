"""The knowledge base and graph of one instance, built from the settings without I/O.

The service's runtime and the CLI's embedded mode (``warmrag ingest --embedded``) build
them here, so both write the same collection, docstore and graph the same way.
"""

from __future__ import annotations

import os
import socket

from qdrant_client import QdrantClient

from api.config import Settings
from kg.extract import TripleExtractor
from kg.store import KnowledgeGraph
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.collection import SharedCollection
from rag.knowledge.commit import EmbeddedCommit
from rag.knowledge.edge import EdgeIndex
from rag.knowledge.embedding import EMBEDDING_DIM, Embedder
from rag.knowledge.graph_sync import GraphSync
from rag.knowledge.models import EmbeddedIndex
from rag.knowledge.service import KnowledgeService
from rag.knowledge.shared_commit import SharedCommit
from rag.knowledge.vectors import QdrantIndex, VectorIndex


def qdrant_client(settings: Settings) -> QdrantClient:
    """The Qdrant server's client, or the data folder's local-mode store."""
    if settings.qdrant_url:
        key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return QdrantClient(url=settings.qdrant_url, api_key=key)
    # Local mode: brute-force search, one client per folder (exclusive lock).
    return QdrantClient(path=str(settings.qdrant_path))


def local_mode(settings: Settings) -> QdrantClient:
    """The data folder's local-mode store, unless its vectors moved into an Edge shard:
    local mode would open an empty store beside it and every document would be unfindable."""
    if not settings.qdrant_path.exists() and settings.edge_path.exists():
        raise RuntimeError(
            f"{settings.edge_path} holds this knowledge base's vectors (moved there from "
            f"local mode); set WARMRAG_EMBEDDED_INDEX=edge, or move "
            f"{settings.qdrant_path.name}.migrated back to {settings.qdrant_path.name}"
        )
    return qdrant_client(settings)


def vector_index(settings: Settings) -> VectorIndex:
    """Where the vectors live: a Qdrant server, else the embedded index the settings name.

    Nothing is opened here. The client is looked up at open, so tests can stand one in
    for a server; an Edge index moves a local-mode folder it finds into itself at open."""
    s = settings
    if s.qdrant_is_remote:
        return QdrantIndex(None, s.qdrant_collection, connect=lambda: qdrant_client(s))
    if s.embedded_index is EmbeddedIndex.LOCAL:
        return QdrantIndex(None, s.qdrant_collection, connect=lambda: local_mode(s))
    return EdgeIndex(
        s.edge_path,
        EMBEDDING_DIM,
        hnsw_m=s.qdrant_hnsw_m,
        hnsw_ef_construct=s.qdrant_hnsw_ef_construct,
        migrate_from=(s.qdrant_path, s.qdrant_collection),
    )


def shared_collection(settings: Settings) -> SharedCollection | None:
    """On a Qdrant server the collection is shared: see ``rag.knowledge.collection``."""
    if not settings.qdrant_is_remote:
        return None
    return SharedCollection(
        writer_id=None,  # the data folder's, read at open
        writer_name=settings.instance_name or f"{socket.gethostname()}:{os.getpid()}",
        hnsw_m=settings.qdrant_hnsw_m,
        hnsw_ef_construct=settings.qdrant_hnsw_ef_construct,
        lease_ttl_s=settings.qdrant_lease_ttl_s,
    )


def build_knowledge(settings: Settings, embedder: Embedder) -> KnowledgeService:
    """The knowledge base and its graph, with the writes that keep them together
    (``KnowledgeService.open`` opens them)."""
    s = settings
    shared = shared_collection(s)
    kb = KnowledgeBase(
        s.data_dir,
        vector_index(s),
        embedder,
        collection=s.qdrant_collection,
        chunk_tokens=s.chunk_tokens,
        chunk_overlap_tokens=s.chunk_overlap_tokens,
        commit=EmbeddedCommit() if shared is None else SharedCommit(shared),
        embed_keys=("title",) if s.embed_title else (),
        chunking=s.chunking,
        load=False,
    )
    graph = KnowledgeGraph(s.data_dir / "kg", embedder.embed_texts, load=False)
    extractor = TripleExtractor() if s.kg_extraction else None
    return KnowledgeService(
        kb,
        GraphSync(kb, graph, extractor, load=False),
        parse_beside=s.kg_parse_beside_embedding,
    )
