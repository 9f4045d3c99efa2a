"""Questions predicted from documents: from their headings (the default source) or
their first sentence; then through the warmup layer on a real knowledge base."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rag.chat.query import normalize_query
from rag.knowledge.base import StoredChunk
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn
from tests.warmup.rig import make_rig
from warmup.predict import DocumentQuerySource, predicted_questions


def chunk(text: str, heading: str | None = None, title: str | None = None) -> StoredChunk:
    return StoredChunk("c", text, 0, heading, title)


def test_headings_give_each_distinct_section_once_in_document_order() -> None:
    chunks = [
        chunk("Intro text. More.", None, "Merging"),
        chunk("a", "Undoing a merge", "Merging"),
        chunk("b", "Undoing a merge", "Merging"),
        chunk("c", "Fast-forward merges", "Merging"),
        chunk("d", "Squash", "Merging"),
    ]
    assert predicted_questions(chunks, DocumentQuerySource.HEADINGS) == [
        "Merging",
        "Merging > Undoing a merge",
        "Merging > Fast-forward merges",
    ]  # at most three per document


def test_a_document_without_headings_falls_back_to_its_first_sentence() -> None:
    chunks = [chunk("# ignored heading line\nThe river Zorn is green. It has trout.")]
    assert predicted_questions(chunks, DocumentQuerySource.HEADINGS) == ["The river Zorn is green."]
    titled = [chunk("The river Zorn is green. It has trout.", "Rivers", "Zorn")]
    assert predicted_questions(titled, DocumentQuerySource.FIRST_SENTENCE) == [
        "The river Zorn is green."
    ]
    assert predicted_questions([], DocumentQuerySource.HEADINGS) == []


def test_a_new_markdown_document_seeds_its_headings_and_warms_them(
    tmp_path: Path, embedder: Embedder
) -> None:
    async def main() -> None:
        rig = await make_rig(tmp_path, embedder, document_queries=True)
        try:
            text = (
                "# Rye bread\n\nRye bread is sour and dark.\n\n"
                "## Baking\n\nBake it for an hour at 220 degrees.\n\n"
                "## Keeping\n\nIt keeps a week in a cloth bag.\n"
            )
            doc = DocumentIn(id="rye.md", text=text, metadata={"title": "Rye bread"})
            await rig.ingest(doc)
            report = await rig.service.flush()
            keys = {q.key for q in rig.service.registry.queries() if q.seed}
            assert normalize_query("Rye bread > Baking") in keys
            assert normalize_query("Rye bread > Keeping") in keys
            assert report.warm_requests >= 1 and rig.service.registry.entry_count() >= 1
        finally:
            await rig.close()

    asyncio.run(main())
