"""The scale section's corpus: real ingested chunks and their noisy copies, as many as a
size asks for (``bench.scale`` and ``bench.scale_startup`` fill their indexes with them)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode

from rag.knowledge.ingest import CHUNK_INDEX_KEY, DOC_HASH_KEY

#: Per-dimension noise on the copies' embeddings: cosine to the original ~0.96.
NOISE = 0.015
INSERT_BATCH = 1000


@dataclass(frozen=True)
class Chunk:
    """One ingested chunk as the knowledge base stored it: its document's committed content
    hash and its position travel with the copies, so the KB counts them as committed."""

    doc_id: str
    doc_hash: str
    index: int
    text: str
    metadata: dict[str, object]


def copies_between(
    chunks: list[Chunk], vectors: np.ndarray, start: int, end: int, rng: np.random.Generator
) -> Iterator[list[BaseNode]]:
    """Points ``start``..``end`` in batches of ``INSERT_BATCH`` (one ``copies`` call each)."""
    for first in range(start, end, INSERT_BATCH):
        yield copies(chunks, vectors, first, min(INSERT_BATCH, end - first), rng)


def copies(
    chunks: list[Chunk], vectors: np.ndarray, start: int, count: int, rng: np.random.Generator
) -> list[BaseNode]:
    """Points ``start``..``start+count``: the real chunks first, then noisy copies of them.

    Copy ``k`` of a chunk belongs to document ``<doc_id>~<k>``, with the same content and so
    the same content hash; like rag/knowledge/ingest.py, each node has a SOURCE relationship to its
    document (passages come back with their doc_id) and carries that hash and its position.
    """
    index = np.arange(start, start + count)
    base, copy = index % len(chunks), index // len(chunks)
    embeddings = vectors[base] + NOISE * (copy > 0)[:, None] * rng.standard_normal(
        (count, vectors.shape[1]), dtype=np.float32
    )
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    nodes: list[BaseNode] = []
    for b, k, embedding in zip(base, copy, embeddings, strict=True):
        chunk = chunks[int(b)]
        doc_id = chunk.doc_id if k == 0 else f"{chunk.doc_id}~{k}"
        metadata = {**chunk.metadata, DOC_HASH_KEY: chunk.doc_hash, CHUNK_INDEX_KEY: chunk.index}
        node = TextNode(text=chunk.text, embedding=embedding.tolist(), metadata=metadata)
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc_id)
        nodes.append(node)
    return nodes
