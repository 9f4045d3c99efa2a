"""What a stored chunk shows a reader: its text, its hash, and the passages that a search's
hits make once those a committed document no longer owns are left out."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from llama_index.core.schema import BaseNode, MetadataMode

from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.models import Passage
from rag.knowledge.vectors import Hit


def text_hash(text: str) -> str:
    """A chunk text's short hash: what the warm registry compares (``warmup.changes``)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def node_text(node: BaseNode) -> str:
    """A chunk's text alone, as the prompt shows it (without the embedded title)."""
    return node.get_content(metadata_mode=MetadataMode.NONE)


def passages_from_hits(
    hits: Sequence[Hit],
    current: Mapping[str, str | None],
    top_k: int,
    *,
    trust_points: bool = False,
) -> list[Passage]:
    """The first ``top_k`` of ``hits`` (best first) as passages.

    A chunk whose document hash is not ``current``'s for its document (left by a write
    that crashed or whose clean-up failed) is skipped: deleted or replaced text is never
    retrievable, whatever the index still holds. ``trust_points``: keep every hit (a
    reader of a shared collection without the writer's lease, whose hashes date from its
    start; Qdrant filtered out unfinished writes)."""
    passages = []
    for hit in hits:
        node = hit.node
        doc_id = node.ref_doc_id or ""
        known = current.get(doc_id)
        stale = known is None or known != node.metadata.get(DOC_HASH_KEY)
        if stale and not trust_points:
            continue
        text = node_text(node)
        passages.append(
            Passage(
                doc_id=doc_id,
                chunk_id=node.node_id,
                text=text,
                score=round(float(hit.score), 6),
                content_hash=text_hash(text),
            )
        )
    return passages[:top_k]
