"""Questions a new document predicts, before anyone asked them (first sight).

Warmup can only serve from cache a context that was warmed, and a question nobody
asked before has none. With ``WARMRAG_WARMUP_DOCUMENT_QUERIES`` each new or updated
document seeds questions of its own, warmed within the budget and ranked below every
question users really asked (``warmup.heat``). Where they come from
(``WARMRAG_WARMUP_DOCUMENT_QUERY_SOURCE``), without an LLM:

- ``headings``: the document's title and each section heading its chunks sit under
  ("Branching and merging > Undoing a merge"): what a reader of technical
  documentation asks about;
- ``first_sentence``: the first sentence of its first chunk.

docs/warmup.md#first-sight gives what each measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from rag.knowledge.models import StoredChunk

#: Predicted questions per document at most (the budget ranks them all below real ones).
PER_DOCUMENT = 3


class DocumentQuerySource(StrEnum):
    HEADINGS = "headings"
    FIRST_SENTENCE = "first_sentence"


def first_sentence(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    prose = " ".join(lines)
    end = prose.find(". ")
    return (prose[: end + 1] if end > 0 else prose)[:300]


def heading_questions(chunks: Sequence[StoredChunk], limit: int = PER_DOCUMENT) -> list[str]:
    """The title and heading path of each distinct section, in document order."""
    out: list[str] = []
    for chunk in chunks:
        parts = [p for p in (chunk.title, chunk.heading_path) if p]
        text = " > ".join(parts).strip()
        if text and text not in out:
            out.append(text)
        if len(out) >= limit:
            break
    return out


def predicted_questions(chunks: Sequence[StoredChunk], source: DocumentQuerySource) -> list[str]:
    """A document's predicted questions (its chunks in document order); a document
    with no title or heading falls back to its first sentence."""
    if source is DocumentQuerySource.HEADINGS and (found := heading_questions(chunks)):
        return found
    sentence = first_sentence(chunks[0].text) if chunks else ""
    return [sentence] if sentence else []
