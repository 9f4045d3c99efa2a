"""Keep the knowledge graph a function of the knowledge base.

A document's edges are its supplied triples plus those extracted from its chunks.
``GraphSync`` applies every change set to the graph, extracting from the chunk texts
the change carries, and files each document's triples with the content hash they
reflect (in the same write as the triples); ``reconcile`` (run at start) rebuilds
whatever a crash between the two stores left out of step, from the chunks the knowledge
base holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from kg.extract import TripleExtractor
from kg.models import Triple, supplied_triples
from kg.store import KnowledgeGraph
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.models import ChangeSet

log = logging.getLogger(__name__)

#: Documents a start's re-sync parses and writes at once (``GraphSync.reconcile``).
RECONCILE_BATCH = 200


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
        self._lock = threading.Lock()
        if load:
            self.open()

    def open(self) -> None:
        """Read the graph, and which document versions it reflects, from its folder."""
        with self._lock:
            # What changes edit is built by the first change: chats read the snapshot.
            self.graph.load(prepare=False)

    def close(self) -> None:
        self.graph.close()

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
        texts the change carries; note on the change the facts it brought
        (``ChangeSet.new_facts``)."""
        new_facts = self._sync(change.added + change.updated, change.deleted, change.chunk_texts)
        change.new_facts = new_facts.tolist()

    def reconcile(self, batch: int = RECONCILE_BATCH) -> int:
        """Re-sync every document whose graph state does not match the KB; return how many.

        Stale documents go ``batch`` at a time, each batch one write with its versions
        filed: memory stays that of a batch, the log tells the progress, and a start
        interrupted part-way resumes where it stopped (a graph folder deleted under a
        large knowledge base means every document, parsed again)."""
        with self._lock:
            current = self.kb.document_hashes()
            synced = self.graph.document_versions()
            stale = [d for d, h in current.items() if synced.get(d) != h]
            gone = sorted(
                d for d in set(synced) | set(self.graph.document_ids()) if d not in current
            )
        if not stale and not gone:
            return 0
        log.info("knowledge graph: re-syncing %d documents, removing %d", len(stale), len(gone))
        if gone:
            self._sync([], gone, {})
        started = time.monotonic()
        for done in range(0, len(stale), batch):
            self._sync(stale[done : done + batch], [], {})
            finished = min(done + batch, len(stale))
            if finished < len(stale):
                elapsed = time.monotonic() - started
                log.info(
                    "knowledge graph: re-synced %d of %d documents (%d s, about %d s left)",
                    finished,
                    len(stale),
                    elapsed,
                    elapsed / finished * (len(stale) - finished),
                )
        return len(stale) + len(gone)

    def _sync(
        self,
        changed: Iterable[str],
        removed: Iterable[str],
        known: Mapping[str, Sequence[tuple[str, str]]],
    ) -> np.ndarray:
        """Returns the vectors of the triple texts new to the graph."""
        new_facts = np.zeros((0, 0), np.float32)
        with self._lock:
            changed = list(changed)
            # Read each document's state now: concurrent writes converge to the KB's latest.
            hashes = {d: self.kb.document_hash(d) for d in changed}
            chunks = {d: self._chunks(d, known) for d in changed if hashes[d] is not None}
            edges = self.triples_of_documents(chunks)
            if edges:
                new_facts = self.graph.replace_documents(edges, {d: hashes[d] or "" for d in edges})
            removed = list(removed)
            if removed:
                self.graph.remove_documents(removed)
        return new_facts

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
