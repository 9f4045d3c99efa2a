"""Small-to-big passages: retrieval on chunks, the prompt on their surrounding windows.

Chunks must fit the embedding model's 256-word-piece window, or their text is never
embedded (measured: half a real corpus unembedded with 1,024-token chunks), so a hit
is about 200 word-pieces: often a fragment of the section that answers. The prompt
gets each hit widened to its neighbouring chunks within the same document, up to a
budget per passage, as llama-index's sentence-window and parent-document retrievers
do. The windows are a pure function of the retrieved set and the stored chunks:

- a window grows from its hit, the next chunk first (text usually continues), then
  the previous one, while the whole window stays within ``budget_tokens``;
- windows of one document that overlap or touch are merged into one;
- neighbouring chunks overlap (the splitter repeats ~20 word-pieces), and the merged
  text takes each chunk's part after the previous one's end, by stored offsets.

So the same retrieved set always renders a byte-identical prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from rag.knowledge.models import Passage, StoredChunk

TokenCounter = Callable[[str], int]


class ChunkSource(Protocol):
    """The stored chunks of a document, in document order (``KnowledgeBase``)."""

    def chunks(self, doc_id: str) -> list[StoredChunk]: ...


@dataclass(frozen=True)
class Span:
    doc_id: str
    first: int
    last: int


def join_chunks(chunks: Sequence[StoredChunk]) -> str:
    """The text of consecutive chunks, each overlap with its predecessor taken once."""
    if not chunks:
        return ""
    text = chunks[0].text
    end = None if chunks[0].start is None else chunks[0].start + len(chunks[0].text)
    for chunk in chunks[1:]:
        if chunk.start is not None and end is not None and chunk.start <= end:
            text += chunk.text[end - chunk.start :]
        else:
            text += "\n" + _after_overlap(text, chunk.text)
        end = None if chunk.start is None else chunk.start + len(chunk.text)
    return text


def _after_overlap(before: str, after: str, longest: int = 600) -> str:
    """``after`` without the longest start it shares with the end of ``before`` (for
    chunks stored without offsets)."""
    for size in range(min(longest, len(before), len(after)), 0, -1):
        if before.endswith(after[:size]):
            return after[size:]
    return after


class PassageWindows:
    """Widens retrieved chunks to their surrounding windows (see the module doc)."""

    def __init__(self, chunks: ChunkSource, count_tokens: TokenCounter, budget_tokens: int) -> None:
        """``count_tokens`` counts in the embedding model's word-pieces, as chunk sizes
        are; ``budget_tokens`` ≤ one chunk turns widening off."""
        self.source = chunks
        self.count_tokens = count_tokens
        self.budget_tokens = budget_tokens

    def widen(self, passages: Sequence[Passage]) -> list[Passage]:
        """The passages with ``window`` set: their merged window's text."""
        if not passages:
            return []
        by_doc = {p.doc_id: self.source.chunks(p.doc_id) for p in passages}
        spans: dict[str, Span] = {}
        for p in passages:
            chunks = by_doc[p.doc_id]
            index = next((i for i, c in enumerate(chunks) if c.chunk_id == p.chunk_id), None)
            if index is not None:
                spans[p.chunk_id] = self._grow(p.doc_id, chunks, index)
        merged = _merge(spans.values())
        widened = []
        for p in passages:
            span = spans.get(p.chunk_id)
            if span is None:  # not in the docstore any more: keep the hit as it is
                widened.append(p)
                continue
            whole = next(m for m in merged if m.doc_id == span.doc_id and m.first <= span.first)
            text = join_chunks(by_doc[p.doc_id][whole.first : whole.last + 1])
            widened.append(p.model_copy(update={"window": text}))
        return widened

    def _grow(self, doc_id: str, chunks: list[StoredChunk], index: int) -> Span:
        first = last = index
        for step in range(1, len(chunks)):
            grew = False
            for candidate in (index + step, index - step):
                if not 0 <= candidate < len(chunks):
                    continue
                lo, hi = min(first, candidate), max(last, candidate)
                if hi - lo != last - first + 1:
                    continue  # not adjacent to the window (the other side stopped)
                if self.count_tokens(join_chunks(chunks[lo : hi + 1])) <= self.budget_tokens:
                    first, last, grew = lo, hi, True
            if not grew:
                break
        return Span(doc_id, first, last)


def _merge(spans: Iterable[Span]) -> list[Span]:
    """Overlapping or touching spans of one document, merged; sorted by document and
    start, the latest start last (so the first span at or before a start is found by
    scanning from the end)."""
    ordered = sorted(spans, key=lambda s: (s.doc_id, s.first))
    merged: list[Span] = []
    for span in ordered:
        if merged and merged[-1].doc_id == span.doc_id and span.first <= merged[-1].last + 1:
            last = merged[-1]
            merged[-1] = Span(span.doc_id, last.first, max(last.last, span.last))
        else:
            merged.append(span)
    return merged[::-1]
