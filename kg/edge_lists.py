"""Which edges each chunk (and each document) of a ``GraphSnapshot`` states.

Passages are linked to the graph through their chunk's edges, and a change removes a
document's edges, so both lookups must be cheap. Built as dicts of index arrays, these lists
were rebuilt in Python, edge by edge, after every change (1.5 s at 323,000 triples). Here
each edge carries an integer chunk id in the snapshot's edge order, and the edges of chunk
``c`` are ``order[ptr[c]:ptr[c + 1]]``: a change splices the ids and renumbers the order
it had (``kg.moves``), and only its own documents' entries change in the dicts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from kg.moves import Moves
from kg.numbering import INDEX

_EMPTY = np.zeros(0, dtype=INDEX)

ChunkKey = tuple[str, str | None]
"""(doc_id, chunk_id); a chunk id of None files the edge for the whole document."""


@dataclass(frozen=True)
class ChunkIndex:
    """Edges by chunk (module docstring). Immutable: ``apply`` returns a new index."""

    #: Ids of chunks gone may pile up to twice the live ones plus this many.
    _SPARE_IDS: ClassVar[int] = 1024

    documents: dict[str, dict[str | None, int]] = field(default_factory=dict)
    edge_chunk: np.ndarray = field(default_factory=lambda: _EMPTY)
    ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, INDEX))
    order: np.ndarray = field(default_factory=lambda: _EMPTY)
    #: Chunks that state edges (those in ``documents``), kept by each change: counted
    #: anew, a change at 1,000,000 documents walked them all.
    live: int = 0

    @classmethod
    def of(cls, edge_doc: Sequence[str], edge_chunk: Sequence[str | None]) -> ChunkIndex:
        """The index of edges stated by (``edge_doc[i]``, ``edge_chunk[i]``)."""
        documents: dict[str, dict[str | None, int]] = {}
        count = 0

        def chunk_id(doc: str, chunk: str | None) -> int:
            nonlocal count
            chunks = documents.setdefault(doc, {})
            found = chunks.get(chunk)
            if found is None:
                found = chunks[chunk] = count
                count += 1
            return found

        ids = np.fromiter(
            (chunk_id(d, c) for d, c in zip(edge_doc, edge_chunk, strict=True)),
            INDEX,
            len(edge_doc),
        )
        return cls._sorted(documents, ids, count)

    @classmethod
    def of_indexes(
        cls, edge_doc: np.ndarray, edge_chunk: np.ndarray, strings: Sequence[str | None]
    ) -> ChunkIndex:
        """``of``, from each edge's document and chunk as indexes into ``strings`` (a saved
        snapshot's): the same index, chunks numbered in the order first met, without a
        dict lookup an edge (4.9 s of a start at 3.2 million edges). A string may stand
        in ``strings`` more than once (a change adds its strings without looking them
        up: ``kg.saved_strings``): equal documents and chunks are one."""
        width = max(1, len(strings))
        pairs = edge_doc.astype(np.int64) * width + edge_chunk
        unique, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
        met = np.argsort(first, kind="stable")
        documents: dict[str, dict[str | None, int]] = {}
        numbers: list[int] = []
        size = 0
        for pair in unique[met].tolist():
            doc, chunk = divmod(pair, width)
            found = documents.setdefault(strings[doc], {}).setdefault(strings[chunk], size)
            numbers.append(found)
            size += found == size
        number = np.empty(len(unique), INDEX)
        number[met] = numbers
        return cls._sorted(documents, number[inverse.reshape(-1)], size)

    @classmethod
    def _sorted(
        cls, documents: dict[str, dict[str | None, int]], edge_chunk: np.ndarray, size: int
    ) -> ChunkIndex:
        ptr = np.zeros(size + 1, INDEX)
        np.cumsum(np.bincount(edge_chunk, minlength=size), out=ptr[1:])
        order = np.argsort(edge_chunk, kind="stable").astype(INDEX)
        live = sum(len(chunks) for chunks in documents.values())
        return cls(documents, edge_chunk, ptr, order, live)

    def edges(self, doc_id: str, chunk_id: str | None) -> np.ndarray | None:
        """The chunk's edges, ascending (None: it states none)."""
        found = self.documents.get(doc_id, {}).get(chunk_id)
        return None if found is None else self._range(found)

    def document(self, doc_id: str) -> np.ndarray:
        """Every edge of the document, ascending."""
        chunks = self.documents.get(doc_id)
        if not chunks:
            return _EMPTY
        return np.sort(np.concatenate([self._range(c) for c in chunks.values()]))

    def chunk_keys(self) -> list[ChunkKey]:
        """(doc_id, chunk_id) of every chunk that states edges."""
        return [(doc, chunk) for doc, chunks in self.documents.items() for chunk in chunks]

    def apply(
        self, removed_docs: Collection[str], moves: Moves, added: Sequence[ChunkKey]
    ) -> ChunkIndex:
        """The index after a change: every edge of ``removed_docs`` gone (``moves.keep``
        is false for exactly those), and ``added[m]``'s edge numbered ``moves.added[m]``.

        Chunks of new edges are new (a change replaces whole documents), so the kept
        edges' order stays as it was, renumbered, and the new chunks' edges follow: no
        sort of every edge (0.7 s of a change at 3.2 million edges)."""
        documents = dict(self.documents)
        live = self.live
        for doc in removed_docs:
            live -= len(documents.pop(doc, ()))
        copied: set[str] = set()  # inner dicts are copied before they change
        size = len(self.ptr) - 1
        ids: list[int] = []
        for doc, chunk in added:
            if doc not in copied:
                documents[doc] = dict(documents.get(doc, {}))
                copied.add(doc)
            chunks = documents[doc]
            found = chunks.get(chunk)
            if found is None:
                found = chunks[chunk] = size
                size += 1
                live += 1
            ids.append(found)
        edge_chunk = self.edge_chunk[moves.keep]
        if ids:
            edge_chunk = np.insert(edge_chunk, moves.positions, ids)
        if size > 2 * live + self._SPARE_IDS:  # ids of chunks gone pile up: renumber
            return self._renumbered(documents, edge_chunk, size)
        old_size = len(self.ptr) - 1
        if ids and min(ids) < old_size:  # a chunk that stated edges states more
            return self._sorted(documents, edge_chunk, size)
        order = moves.moved[self.order]
        order = order[order >= 0]
        if ids:
            order = np.concatenate([order, moves.added[np.argsort(ids, kind="stable")]])
        ptr = np.zeros(size + 1, INDEX)
        np.cumsum(np.bincount(edge_chunk, minlength=size), out=ptr[1:])
        return ChunkIndex(documents, edge_chunk, ptr, order, live)

    @classmethod
    def _renumbered(
        cls, documents: dict[str, dict[str | None, int]], edge_chunk: np.ndarray, size: int
    ) -> ChunkIndex:
        remap = np.full(size, -1, INDEX)
        fresh: dict[str, dict[str | None, int]] = {}
        count = 0
        for doc, chunks in documents.items():
            fresh[doc] = {}
            for chunk, old in chunks.items():
                remap[old] = fresh[doc][chunk] = count
                count += 1
        return cls._sorted(fresh, remap[edge_chunk], count)

    def _range(self, chunk: int) -> np.ndarray:
        return self.order[self.ptr[chunk] : self.ptr[chunk + 1]]
