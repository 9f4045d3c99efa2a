"""Keep the knowledge graph a function of the knowledge base.

A document's edges are its supplied triples plus those extracted from its chunks.
``GraphSync`` applies every change set to the graph and records, per document, the
content hash the graph reflects; ``reconcile`` (run at start) rebuilds whatever a
crash between the two stores left out of step.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Sequence
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

    def triples_of(self, doc_id: str) -> list[Triple]:
        """Supplied triples, then extracted ones with chunk provenance."""
        return self.triples_of_documents([doc_id])[doc_id]

    def triples_of_documents(self, doc_ids: Sequence[str]) -> dict[str, list[Triple]]:
        """``triples_of`` for several documents, their chunks parsed in one stream."""
        triples = {d: supplied_triples(d, self.kb.supplied_triples(d)) for d in doc_ids}
        if self.extractor is not None:
            found = self.extractor.extract_documents({d: self.kb.chunk_texts(d) for d in doc_ids})
            for doc_id, extracted in found.items():
                triples[doc_id] += extracted
        return triples

    def apply(self, change: ChangeSet) -> None:
        """Bring the graph in step with the documents a change touched."""
        self._sync(change.added + change.updated, change.deleted)

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
            self._sync(stale, gone)
        return len(stale) + len(gone)

    def _sync(self, changed: Iterable[str], removed: Iterable[str]) -> None:
        with self._lock:
            changed = list(changed)
            # Read each document's state now: concurrent writes converge to the KB's latest.
            hashes = {d: self.kb.document_hash(d) for d in changed}
            edges = self.triples_of_documents([d for d in changed if hashes[d] is not None])
            if edges:
                self.graph.replace_documents(edges)
            for doc_id in removed:
                self.graph.remove_document(doc_id)
                self._synced.pop(doc_id, None)
            for doc_id in edges:
                self._synced[doc_id] = hashes[doc_id] or ""
            self._save()
