"""Small-to-big: hits widened within their document, overlaps taken once, windows merged."""

from __future__ import annotations

from rag.chat.prompt import PromptBuilder
from rag.chat.windows import PassageWindows, join_chunks
from rag.knowledge.base import StoredChunk
from rag.knowledge.models import Passage

WORDS = [f"w{i}" for i in range(100)]
TEXT = " ".join(WORDS)


def split(size: int = 20, step: int = 15) -> list[StoredChunk]:
    """Chunks of ``size`` words overlapping by ``size - step``, with their offsets."""
    chunks: list[StoredChunk] = []
    start = 0
    while True:
        part = " ".join(WORDS[start : start + size])
        chunks.append(StoredChunk(f"c{len(chunks)}", part, TEXT.index(part)))
        if start + size >= len(WORDS):
            return chunks
        start += step


class Source:
    def __init__(self, chunks: list[StoredChunk]) -> None:
        self.by_doc = {"d": chunks, "e": [StoredChunk("e0", "another document", 0)]}

    def chunks(self, doc_id: str) -> list[StoredChunk]:
        return self.by_doc.get(doc_id, [])


def hit(chunk: StoredChunk, doc_id: str = "d") -> Passage:
    return Passage(doc_id=doc_id, chunk_id=chunk.chunk_id, text=chunk.text, score=0.5)


def words(text: str | None) -> int:
    return len((text or "").split())


def test_joined_chunks_give_the_document_text_once() -> None:
    assert join_chunks(split()) == TEXT
    # Stored without offsets: the shared words are found by their text.
    bare = [StoredChunk(c.chunk_id, c.text, None) for c in split()]
    assert join_chunks(bare).split() == WORDS


def test_a_hit_grows_within_the_budget_next_chunk_first() -> None:
    chunks = split()
    windows = PassageWindows(Source(chunks), lambda t: words(t), budget_tokens=35)
    (widened,) = windows.widen([hit(chunks[2])])  # w30..w49
    assert widened.window == " ".join(WORDS[30:65])  # + the next chunk (35 words), no more
    assert widened.text == chunks[2].text  # the hit itself is kept for the API and registry


def test_touching_windows_of_one_document_merge_and_are_shown_once() -> None:
    chunks = split()
    source = Source(chunks)
    windows = PassageWindows(source, lambda t: words(t), budget_tokens=50)
    other = StoredChunk("e0", "another document", 0)
    hits = [hit(chunks[2]), hit(chunks[6]), hit(other, "e")]
    widened = windows.widen(hits)
    assert widened[0].window == widened[1].window == " ".join(WORDS[15:])
    assert widened[2].window == "another document"
    system = PromptBuilder().prefix(widened).messages[0]["content"]
    assert system.count("w15 w16") == 1 and system.count("[3]") == 0
    # The same retrieved set in any order renders the same prefix.
    assert PromptBuilder().prefix(windows.widen(hits[::-1])).fingerprint == (
        PromptBuilder().prefix(widened).fingerprint
    )


def test_a_budget_of_one_chunk_keeps_the_hit_and_a_vanished_chunk_is_kept_as_is() -> None:
    chunks = split()
    windows = PassageWindows(Source(chunks), lambda t: words(t), budget_tokens=20)
    (widened,) = windows.widen([hit(chunks[3])])
    assert widened.window == chunks[3].text
    gone = Passage(doc_id="d", chunk_id="old", text="replaced meanwhile", score=0.4)
    assert windows.widen([gone]) == [gone]
