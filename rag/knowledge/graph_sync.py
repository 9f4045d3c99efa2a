"""Keep the knowledge graph a function of the knowledge base.

A document's edges are its supplied triples plus those extracted from its chunks.
``GraphSync`` applies every change set to the graph, extracting from the chunk texts
the change carries, and files each document's triples with the content hash they
reflect (in the same write as the triples); ``reconcile`` (run at start) rebuilds
whatever a crash between the two stores left out of step, from the chunks the knowledge
base holds.

A write's chunks can be parsed while the knowledge base embeds them (``parse_ahead``;
``KnowledgeService``'s ``parse_beside``, off by default): spaCy's parse on one core, the
embedding model on the other. On the real section's
1,047 chunks (2-core AMD EPYC, AVX2, int8) the two took 48.5-56.8 s one after the other
and 37.5-39.7 s side by side. The parse writes nothing, so a write that fails after it
loses nothing; ``apply`` uses its triples only for chunks that are still the ones it
parsed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from kg.extract import TripleExtractor
from kg.models import Triple, supplied_triples
from kg.store import KnowledgeGraph
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.models import ChangeSet

log = logging.getLogger(__name__)

#: Documents a start's re-sync parses and writes at once (``GraphSync.reconcile``).
RECONCILE_BATCH = 200


Chunks = Mapping[str, Sequence[tuple[str, str]]]


class ParsedAhead:
    """The triples extracted from a write's new chunks in the parser's thread, while the
    knowledge base embedded them (``GraphSync.parse_ahead``)."""

    def __init__(self, chunks: Chunks, parsed: Future[dict[str, list[Triple]]]) -> None:
        self._chunks = {d: list(c) for d, c in chunks.items()}
        self._parsed = parsed

    def triples(self, doc_id: str, chunks: Sequence[tuple[str, str]]) -> list[Triple] | None:
        """The triples extracted from ``chunks`` where they are the ones parsed for
        ``doc_id`` (waiting for the parse to end); None where they are not, or the parse
        failed (logged): the caller parses them itself."""
        if self._chunks.get(doc_id) != list(chunks):
            return None
        try:
            return self._parsed.result()[doc_id]
        except Exception:
            log.exception("knowledge graph: parsing ahead failed; parsing again")
            self._chunks = {}  # logged once
            return None

    def settle(self) -> None:
        """Wait for the parse (a write that failed does not leave it running behind the
        next one's)."""
        if not self._parsed.cancel():
            self._parsed.exception()


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
        self._parser = ThreadPoolExecutor(1, thread_name_prefix="kg-parse")
        if load:
            self.open()

    def open(self) -> None:
        """Read the graph, and which document versions it reflects, from its folder."""
        with self._lock:
            # What changes edit is built by the first change: chats read the snapshot.
            self.graph.load(prepare=False)

    def close(self) -> None:
        self._parser.shutdown(cancel_futures=True)
        self.graph.close()

    def parse_ahead(self, chunks: Chunks) -> ParsedAhead | None:
        """Start extracting the triples of a write's new ``chunks`` (``ChangeSet.chunk_texts``'s
        shape and order) in the parser's thread; None where nothing is extracted."""
        if self.extractor is None or not chunks:
            return None
        return ParsedAhead(chunks, self._parser.submit(self.extractor.extract_documents, chunks))

    def triples_of_documents(
        self, chunks: Chunks, ahead: ParsedAhead | None = None
    ) -> dict[str, list[Triple]]:
        """Each document's supplied triples, then those extracted from its ``chunks``
        ((chunk_id, text) in document order; the chunk is their provenance): taken from
        ``ahead`` where it parsed those chunks, the rest parsed in one stream."""
        triples = {d: supplied_triples(d, self.kb.supplied_triples(d)) for d in chunks}
        if self.extractor is not None:
            todo: dict[str, Sequence[tuple[str, str]]] = {}
            for doc_id, doc_chunks in chunks.items():
                parsed = ahead.triples(doc_id, doc_chunks) if ahead is not None else None
                if parsed is None:
                    todo[doc_id] = doc_chunks
                else:
                    triples[doc_id] += parsed
            if todo:
                for doc_id, extracted in self.extractor.extract_documents(todo).items():
                    triples[doc_id] += extracted
        return triples

    def apply(self, change: ChangeSet, ahead: ParsedAhead | None = None) -> None:
        """Bring the graph in step with the documents a change touched, from the chunk
        texts the change carries (their triples from ``ahead`` where it parsed them);
        note on the change the facts it brought (``ChangeSet.new_facts``)."""
        changed = change.added + change.updated
        new_facts = self._sync(changed, change.deleted, change.chunk_texts, ahead)
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
        known: Chunks,
        ahead: ParsedAhead | None = None,
    ) -> np.ndarray:
        """Returns the vectors of the triple texts new to the graph."""
        new_facts = np.zeros((0, 0), np.float32)
        with self._lock:
            changed = list(changed)
            # Read each document's state now: concurrent writes converge to the KB's latest.
            hashes = {d: self.kb.document_hash(d) for d in changed}
            chunks = {d: self._chunks(d, known) for d in changed if hashes[d] is not None}
            edges = self.triples_of_documents(chunks, ahead)
            if edges:
                new_facts = self.graph.replace_documents(edges, {d: hashes[d] or "" for d in edges})
            removed = list(removed)
            if removed:
                self.graph.remove_documents(removed)
        return new_facts

    def _chunks(self, doc_id: str, known: Chunks) -> Sequence[tuple[str, str]]:
        """A document's chunks as ``known`` (the change being applied) has them while
        they are its current version, else as the knowledge base holds them: a crash
        left the graph behind (``reconcile``), or a later write replaced them."""
        chunks = known.get(doc_id)
        if chunks is not None and {c for c, _ in chunks} == set(self.kb.chunk_ids(doc_id)):
            return chunks
        return self.kb.chunk_texts(doc_id)
