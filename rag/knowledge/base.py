"""The knowledge base: chunks in a vector index, document hashes in a llama-index docstore.

Every write keeps the store consistent across a crash at any point by its order: new
chunks are added first, then the write commits, then the old chunks are deleted. What
commits it is the ``CommitStrategy``'s (``rag.knowledge.commit``): the state file's
transaction in the embedded default, the points themselves on a Qdrant server. Until the last step,
and if it fails, the index holds chunks no committed document owns ("orphans"): retrieval
never returns them, and ``reconcile`` (run at open, and after a write whose clean-up
failed) removes those the mode may remove.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from llama_index.core import Document
from llama_index.core.ingestion import run_transformations
from llama_index.core.schema import BaseNode
from qdrant_client import QdrantClient

from rag.knowledge.chunking import HEADING_PATH_KEY
from rag.knowledge.commit import CommitStrategy, EmbeddedCommit, require_open
from rag.knowledge.embedding import Embedder
from rag.knowledge.faults import checkpoint
from rag.knowledge.ingest import (
    CHUNK_INDEX_KEY,
    build_pipeline,
    document_hash,
    to_llama_document,
)
from rag.knowledge.models import (
    DEFAULT_CHUNKING,
    ChangeSet,
    ChunkingStrategy,
    ChunkRecord,
    DocumentIn,
    EmbeddingPrecision,
    Passage,
    StoredChunk,
)
from rag.knowledge.passages import node_text, passages_from_hits
from rag.knowledge.state import KBState, Triples
from rag.knowledge.vectors import QdrantIndex, VectorIndex

log = logging.getLogger(__name__)

# QdrantVectorStore creates a payload index that local mode ignores, with a warning
# on every open; where an operator chose local mode, the warning is noise.
warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")


#: What ``KnowledgeBase.upsert`` hands a write's new chunks to before it embeds them:
#: each document's (chunk_id, text), in document order.
ChunksHook = Callable[[dict[str, list[tuple[str, str]]]], None]


class DocumentNotFoundError(KeyError):
    """No document with this id is in the knowledge base."""


class KnowledgeBase:
    """Owns the chunks (a ``VectorIndex``), the document hashes (docstore) and the KB version.

    All methods are thread-safe: an embedded index has one owner per folder, so the
    API, the ingest path and the scheduler share this one instance.
    """

    def __init__(
        self,
        data_dir: Path,
        index: VectorIndex | QdrantClient | Callable[[], QdrantClient],
        embedder: Embedder,
        *,
        collection: str = "warmrag",
        chunk_tokens: int = 200,
        chunk_overlap_tokens: int = 20,
        commit: CommitStrategy | None = None,
        embed_keys: Sequence[str] = ("title",),
        chunking: ChunkingStrategy = DEFAULT_CHUNKING,
        load: bool = True,
    ) -> None:
        """``index``: where the vectors live (``rag.knowledge.vectors``); a Qdrant client,
        or a factory of one called by ``open``, is a ``QdrantIndex`` on ``collection``.
        ``load=False`` defers all I/O (reading the docstore, opening the index,
        reconciling) to ``open``.
        ``commit``: how writes commit, one strategy per knowledge base (``rag.knowledge.commit``):
        ``EmbeddedCommit`` (the default) or, on a collection on a server others may use,
        ``SharedCommit``.
        ``embed_keys``: metadata embedded with each chunk (``rag.knowledge.ingest``);
        ``chunking``: how documents are cut (``rag.knowledge.chunking``)."""
        self._dir = data_dir
        if isinstance(index, QdrantClient):
            index = QdrantIndex(index, collection)
        elif callable(index):
            index = QdrantIndex(None, collection, connect=index)
        self._index: VectorIndex = index
        self._opened = False
        self._collection = collection
        self._embedder = embedder
        self._pipeline = build_pipeline(embedder, chunk_tokens, chunk_overlap_tokens, chunking)
        self._chunking = chunking
        self._embed_keys = tuple(embed_keys)
        self._lock = threading.RLock()  # readers and the short commit sections
        self._writer = threading.Lock()  # one write at a time, for its whole length
        self._state = KBState()
        self._needs_reconcile = False
        self._strategy = commit or EmbeddedCommit()
        if load:
            self.open()

    def open(self) -> None:
        """Open the index, read the docstore, and remove what an interrupted write left."""
        with self._lock:
            if self._opened:
                return
            self._dir.mkdir(parents=True, exist_ok=True)
            self._index.open()
            try:
                state = self._state = self._strategy.open(self._index, self._collection, self._dir)
                if state.recorded_embedding() is None and state.document_count():
                    # Knowledge bases from before the embedder was recorded were all
                    # embedded in float32: recorded so, a default of int8 follows them.
                    state.check_embedding(self._embedder.identity_in(EmbeddingPrecision.FLOAT32))
                self._embedder.follow(state.recorded_embedding())
                state.check_embedding(self._embedder.identity)
            except BaseException:
                self._index.close()
                raise
            self._opened = True
            self.reconcile()

    @property
    def writable(self) -> bool:
        """False while another instance holds the shared collection's writer's lease."""
        return self._strategy.writable

    def release_writer(self) -> None:
        """Give up the shared collection's writer's lease now (read-only from here on),
        so another instance can take over without waiting for it to lapse."""
        with self._writer:
            self._strategy.release()

    def close(self) -> None:
        with self._lock:
            self._strategy.release()
            if self._opened:
                self._index.close()
                self._state.close()
                self._state = KBState()
                self._opened = False

    @property
    def index(self) -> VectorIndex:
        return require_open(self._index if self._opened else None)

    # ----- state --------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._state.version

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def document_ids(self) -> list[str]:
        with self._lock:
            return self._state.document_ids()

    def document_count(self) -> int:
        with self._lock:
            return self._state.document_count()

    def document_hashes(self) -> dict[str, str | None]:
        """Every document's hash, by id (sorted)."""
        with self._lock:
            return self._state.hashes()

    def document_hash(self, doc_id: str) -> str | None:
        with self._lock:
            return self._state.docstore.get_document_hash(doc_id)

    def supplied_triples(self, doc_id: str) -> list[list[str]]:
        with self._lock:
            return self._state.supplied_triples(doc_id)

    def chunk_ids(self, doc_id: str) -> list[str]:
        with self._lock:
            info = self._state.docstore.get_ref_doc_info(doc_id)
            return list(info.node_ids) if info else []

    def chunk_texts(self, doc_id: str) -> list[tuple[str, str]]:
        """(chunk_id, text) of a document's chunks, in document order."""
        return [(c.chunk_id, c.text) for c in self.chunks(doc_id)]

    def chunks(self, doc_id: str) -> list[StoredChunk]:
        """A document's chunks in document order, with where each starts in its text."""
        with self._lock:
            nodes = self._state.docstore.get_nodes(self.chunk_ids(doc_id), raise_error=False)
        nodes.sort(key=lambda n: n.metadata.get(CHUNK_INDEX_KEY, 0))
        return [
            StoredChunk(
                n.node_id,
                node_text(n),
                getattr(n, "start_char_idx", None),
                n.metadata.get(HEADING_PATH_KEY) or None,
                n.metadata.get("title") or None,
            )
            for n in nodes
        ]

    # ----- writes -------------------------------------------------------------

    def upsert(
        self, documents: Sequence[DocumentIn], on_chunked: ChunksHook | None = None
    ) -> ChangeSet:
        """Add new documents, replace changed ones, skip unchanged ones (embedding nothing).

        Embedding happens before any write, so a failure there stores nothing. It
        also happens outside the read lock: chats retrieve while a large document
        is embedded, and wait at most for the commit itself.

        ``on_chunked`` is handed the new chunks, as ``ChangeSet.chunk_texts`` will hold
        them (the added documents first, then the updated ones), once they are cut and
        before they are embedded: work on them can run beside the embedding
        (``rag.knowledge.service``). It must not block.
        """
        with self._writer:
            self._state = self._strategy.take_writer(self._state)  # or CollectionLeasedError
            added: list[str] = []
            updated: list[str] = []
            unchanged: list[str] = []
            todo: list[Document] = []
            triples: Triples = {}
            with self._lock:
                for doc in documents:
                    digest = document_hash(doc, self._chunking)
                    previous = self._state.docstore.get_document_hash(doc.id)
                    if previous == digest:
                        unchanged.append(doc.id)
                        continue
                    (updated if previous else added).append(doc.id)
                    todo.append(to_llama_document(doc, digest, self._embed_keys))
                    triples[doc.id] = doc.triples
                if not todo:
                    return ChangeSet(unchanged=unchanged, kb_version=self._state.version)
                old_chunks = [c for doc_id in updated for c in self.chunk_ids(doc_id)]

            *cut, embed = self._pipeline.transformations
            nodes = list(run_transformations(todo, cut))
            texts: dict[str, list[tuple[str, str]]] = {}
            for n in nodes:  # in document order: ``ChunkIdentity`` numbered them so
                texts.setdefault(n.ref_doc_id or "", []).append((n.node_id, node_text(n)))
            texts = {d: texts[d] for d in [*added, *updated] if d in texts}
            if on_chunked is not None:
                on_chunked(texts)
            nodes = list(embed(nodes))
            stale = sorted(set(old_chunks) - {n.node_id for n in nodes})
            with self._lock:
                self._strategy.stage(self._state, nodes, triples)
            checkpoint("ingest.embedded")

            with self._lock:
                try:
                    self._commit(todo, nodes, triples, stale)
                except BaseException:
                    self._rollback()
                    raise
            checkpoint("ingest.committed")
            self._remove_chunks([n.node_id for n in nodes], stale)
            checkpoint("ingest.old_chunks_removed")
            self._index_new_chunks()
            return ChangeSet(
                added=added,
                updated=updated,
                unchanged=unchanged,
                added_chunks=[
                    ChunkRecord(
                        doc_id=n.ref_doc_id or "", chunk_id=n.node_id, embedding=n.embedding or []
                    )
                    for n in nodes
                ],
                removed_chunk_ids=stale,
                kb_version=self._state.version,
                chunk_texts=texts,
            )

    def _commit(
        self, docs: list[Document], nodes: list[BaseNode], triples: Triples, stale: list[str]
    ) -> None:
        """Add the new chunks, then make the new document versions current (and the
        chunks they replace ``stale``, removed next)."""
        self.index.add(nodes)
        checkpoint("ingest.vectors_added")
        self._strategy.publish([n.node_id for n in nodes])
        self._state.put(docs, nodes, triples)
        self._strategy.retire(self._state, stale)
        self._state.version += 1
        self._strategy.save(self._state)

    def _rollback(self) -> None:
        """After a failed write: back to the committed state, minus any orphaned chunks.

        If the index cannot remove them now, retrieval still hides them and the next
        ``reconcile`` removes them."""
        try:
            self._state = self._strategy.reread(self._state)
            self.reconcile()
        except Exception:
            log.exception("rollback: orphaned chunks stay hidden until the next reconcile")
            self._needs_reconcile = True

    def _remove_chunks(self, added: Sequence[str], chunk_ids: Sequence[str]) -> None:
        """Clean-up after a commit: the write has happened, so a failure here only
        leaves orphans (hidden from retrieval) for ``reconcile_if_needed``. ``added``:
        the write's own new chunks, owned now."""
        try:
            with self._lock:
                if chunk_ids and self.index.exists():
                    self.index.delete(list(chunk_ids))
                self._strategy.settle(self._state, [*added, *chunk_ids])
        except Exception:
            log.exception("removing %d old chunks failed; retried later", len(chunk_ids))
            self._needs_reconcile = True

    def _index_new_chunks(self) -> None:
        """After a committed write: let the index build what it builds on request (the
        embedded Edge shard's HNSW, in its own process). A failure leaves the new chunks
        searchable by brute force until the next write retries."""
        try:
            self.index.optimize()
        except Exception:
            log.exception("indexing the new chunks failed; they stay searchable unindexed")

    @property
    def needs_reconcile(self) -> bool:
        """A clean-up failed: orphaned chunks are hidden but still stored."""
        return self._needs_reconcile

    def reconcile_if_needed(self) -> int:
        with self._lock:
            if not self._needs_reconcile:
                return 0
            removed = self.reconcile()
            self._needs_reconcile = False
            return removed

    def delete(self, doc_id: str) -> ChangeSet:
        with self._writer, self._lock:
            self._state = self._strategy.take_writer(self._state)  # or CollectionLeasedError
            if self._state.docstore.get_document_hash(doc_id) is None:
                raise DocumentNotFoundError(doc_id)
            chunks = self.chunk_ids(doc_id)
            self._strategy.withdraw(doc_id)
            try:
                self._state.forget(doc_id)
                self._strategy.retire(self._state, chunks)
                self._state.version += 1
                self._strategy.save(self._state)
            except BaseException:
                self._rollback()
                raise
            checkpoint("delete.committed")
            self._remove_chunks([], chunks)
            checkpoint("delete.chunks_removed")
            return ChangeSet(
                deleted=[doc_id], removed_chunk_ids=chunks, kb_version=self._state.version
            )

    def reconcile(self) -> int:
        """Delete chunks that no committed document version owns; return how many.

        On a shared collection: only this instance's own half-finished writes, and
        only while it holds the writer's lease."""
        with self._lock:
            if not self.index.exists():
                return 0
            return self._strategy.remove_leftovers(self._state)

    # ----- reads --------------------------------------------------------------

    def retrieve(self, query_embedding: np.ndarray, top_k: int = 3) -> list[Passage]:
        """Top-k chunks by cosine similarity, best first; a chunk no committed document
        version owns is skipped (``passages_from_hits``)."""
        with self._lock:
            if not self.index.exists():
                return []
            fetch = top_k + (16 if self._needs_reconcile else 2)
            hits = self.index.search(query_embedding.tolist(), fetch, self._strategy.visible())
            # A reader without the lease knows only what was there at its start.
            trust_points = not self.writable
            current = {
                d: self._state.docstore.get_document_hash(d)
                for d in {h.node.ref_doc_id or "" for h in hits}
            }
        return passages_from_hits(hits, current, top_k, trust_points=trust_points)

    def count_chunks(self) -> int:
        with self._lock:
            if not self.index.exists():
                return 0
            return self.index.count(self._strategy.visible())
