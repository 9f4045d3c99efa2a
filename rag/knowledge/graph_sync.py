"""Keep the knowledge graph a function of the knowledge base.

A document's edges are its supplied triples plus those extracted from its chunks.
``GraphSync`` applies every change set to the graph, extracting from the chunk texts
the change carries, and records, per document, the content hash the graph reflects;
``reconcile`` (run at start) rebuilds whatever a crash between the two stores left out
of step, from the chunks the knowledge base holds.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from durable import atomic_write, remove_stale_temps
from kg.extract import TripleExtractor
from kg.models import Triple, supplied_triples
from kg.store import KnowledgeGraph
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.models import ChangeSet

log = logging.getLogger(__name__)

SYNC_FILE = "synced_documents.json"


class GraphSync:
    def __init__(
        self,
        kb: KnowledgeBase,
        graph: KnowledgeGraph,
        extractor: TripleExtractor | None,
        *,
        load: bool = True,
    ) -> None:
        self.kb = kb
        self.graph = graph
        self.extractor = extractor
        self._path = graph.folder / SYNC_FILE
        self._lock = threading.Lock()
        self._synced: dict[str, str] = {}
        if load:
            self.open()

    def open(self) -> None:
        """Read which document versions the graph reflects."""
        with self._lock:
            remove_stale_temps(self._path.parent, self._path.name)
            self._synced = self._load()

    def _load(self) -> dict[str, str]:
        if not self._path.exists():
            return {}
        return dict(json.loads(self._path.read_text(encoding="utf-8")))

    def _save(self) -> None:
        data = json.dumps(self._synced, sort_keys=True).encode()
        atomic_write(Path(self._path), lambda fh: fh.write(data))

    def triples_of_documents(
        self, chunks: Mapping[str, Sequence[tuple[str, str]]]
    ) -> dict[str, list[Triple]]:
        """Each document's supplied triples, then those extracted from its ``chunks``
        ((chunk_id, text) in document order; the chunk is their provenance), all the
        documents' chunks parsed in one stream."""
        triples = {d: supplied_triples(d, self.kb.supplied_triples(d)) for d in chunks}
        if self.extractor is not None:
            for doc_id, extracted in self.extractor.extract_documents(chunks).items():
                triples[doc_id] += extracted
        return triples

    def apply(self, change: ChangeSet) -> None:
        """Bring the graph in step with the documents a change touched, from the chunk
        texts the change carries."""
        self._sync(change.added + change.updated, change.deleted, change.chunk_texts)

    def reconcile(self) -> int:
        """Re-sync every document whose graph state does not match the KB; return how many."""
        with self._lock:
            current = {d: self.kb.document_hash(d) for d in self.kb.document_ids()}
            stale = [d for d, h in current.items() if self._synced.get(d) != h]
            gone = [
                d for d in set(self._synced) | set(self.graph.document_ids()) if d not in current
            ]
        if stale or gone:
            log.info("knowledge graph: re-syncing %d documents, removing %d", len(stale), len(gone))
            self._sync(stale, gone, {})
        return len(stale) + len(gone)

    def _sync(
        self,
        changed: Iterable[str],
        removed: Iterable[str],
        known: Mapping[str, Sequence[tuple[str, str]]],
    ) -> None:
        with self._lock:
            changed = list(changed)
            # Read each document's state now: concurrent writes converge to the KB's latest.
            hashes = {d: self.kb.document_hash(d) for d in changed}
            chunks = {d: self._chunks(d, known) for d in changed if hashes[d] is not None}
            edges = self.triples_of_documents(chunks)
            if edges:
                self.graph.replace_documents(edges)
            for doc_id in removed:
                self.graph.remove_document(doc_id)
                self._synced.pop(doc_id, None)
            for doc_id in edges:
                self._synced[doc_id] = hashes[doc_id] or ""
            self._save()

    def _chunks(
        self, doc_id: str, known: Mapping[str, Sequence[tuple[str, str]]]
    ) -> Sequence[tuple[str, str]]:
        """A document's chunks as ``known`` (the change being applied) has them while
        they are its current version, else as the knowledge base holds them: a crash
        left the graph behind (``reconcile``), or a later write replaced them."""
        chunks = known.get(doc_id)
        if chunks is not None and {c for c, _ in chunks} == set(self.kb.chunk_ids(doc_id)):
            return chunks
        return self.kb.chunk_texts(doc_id)
