"""Ingestion components: documents → chunks sized for the embedder → embeddings.

The steps are llama-index ``TransformComponent``s run by an ``IngestionPipeline``.
The pipeline only transforms; ``KnowledgeBase`` decides what to upsert (by content
hash) and writes, so nothing is deleted before its replacement is embedded.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent
from pydantic import PrivateAttr

from rag.knowledge.chunking import StructureSplitter
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import (
    DEFAULT_CHUNKING,
    ChunkingStrategy,
    DocumentFormat,
    DocumentIn,
    document_format,
)

# Chunk ids must be UUIDs for Qdrant; deriving them from (document, content, position)
# makes a replayed ingest write the same points instead of duplicates.
_CHUNK_NAMESPACE = uuid.UUID("5c4a8f3e-2b7d-4e51-9a0c-7d1f6b2e8a43")

#: Metadata keys warmrag adds to every chunk.
DOC_HASH_KEY = "doc_hash"
CHUNK_INDEX_KEY = "chunk_index"


def document_hash(doc: DocumentIn, chunking: ChunkingStrategy) -> str:
    """Content hash of everything that defines a document's chunks and triples: its
    content and, where it changes the chunks (a Markdown document under ``structure``;
    plain text is cut by the sentence splitter either way), the chunking strategy, so
    that re-ingesting a document under another strategy re-chunks it instead of
    skipping it as unchanged. Plain-text hashes are those warmrag always computed; a
    Markdown document stored before ``structure`` existed is re-chunked when next
    ingested."""
    content: dict[str, Any] = {"text": doc.text, "metadata": doc.metadata, "triples": doc.triples}
    if chunking == ChunkingStrategy.STRUCTURE and (
        document_format(doc.id, doc.metadata) == DocumentFormat.MARKDOWN
    ):
        content["chunking"] = chunking.value
    payload = json.dumps(content, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


def to_llama_document(doc: DocumentIn, doc_hash: str, embed_keys: Sequence[str] = ()) -> Document:
    """Metadata is stored, and only the ``embed_keys`` holding text (the title) are
    embedded with every chunk ("title: ...", llama-index's layout): a chunk deep in a
    section then still says what it is about. The splitter counts that header in the
    chunk's size, so header and text together fit the embedder's 256-word-piece window.
    The prompt shows the text alone."""
    metadata: dict[str, Any] = {**doc.metadata, DOC_HASH_KEY: doc_hash}
    embedded = {k for k in embed_keys if isinstance(metadata.get(k), str) and metadata[k]}
    keys = [*list(metadata), CHUNK_INDEX_KEY]
    return Document(
        id_=doc.id,
        text=doc.text,
        metadata=metadata,
        excluded_embed_metadata_keys=[k for k in keys if k not in embedded],
        excluded_llm_metadata_keys=keys,
    )


class ChunkIdentity(TransformComponent):
    """Give each chunk a deterministic id and its position within the document."""

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        position: dict[str, int] = {}
        for node in nodes:
            doc_id = node.ref_doc_id or node.node_id
            index = position.get(doc_id, 0)
            position[doc_id] = index + 1
            node.metadata[CHUNK_INDEX_KEY] = index
            node.id_ = str(
                uuid.uuid5(
                    _CHUNK_NAMESPACE, f"{doc_id}\x00{node.metadata[DOC_HASH_KEY]}\x00{index}"
                )
            )
        return nodes


class ChunkEmbedder(TransformComponent):
    """Embed chunk text with the shared ``Embedder`` (normalized, counted)."""

    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._embedder = embedder

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        texts = [node.get_content(metadata_mode=MetadataMode.EMBED) for node in nodes]
        vectors = self._embedder.embed_texts(texts)
        for node, vector in zip(nodes, vectors, strict=True):
            node.embedding = vector.tolist()
        return nodes


def build_pipeline(
    embedder: Embedder,
    chunk_tokens: int,
    overlap_tokens: int,
    chunking: ChunkingStrategy = DEFAULT_CHUNKING,
) -> IngestionPipeline:
    """Splitter (``rag.knowledge.chunking``; counted in the embedder's own word-pieces) → ids →
    embeddings."""
    overlap = min(overlap_tokens, chunk_tokens // 2)
    splitter: NodeParser
    if chunking == ChunkingStrategy.STRUCTURE:
        splitter = StructureSplitter(chunk_tokens, overlap, embedder.tokenizer)
    else:
        splitter = SentenceSplitter(
            chunk_size=chunk_tokens, chunk_overlap=overlap, tokenizer=embedder.tokenizer
        )
    return IngestionPipeline(
        transformations=[splitter, ChunkIdentity(), ChunkEmbedder(embedder)],
        disable_cache=True,  # unchanged documents are skipped before the pipeline runs
    )
