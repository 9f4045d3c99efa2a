"""The chunking and faithfulness benchmarks score what they claim to: a page's sections
are found where the Markdown puts them, and an answer's [n] is judged against the
passage its prompt numbered n. Cheap: fixtures in strings, no model."""

from __future__ import annotations

from bench.chunking_quality import render_page
from bench.faithfulness import citations, judge, summarize
from bench.real_corpus import sections_from_source
from bench.retrieval_quality import GoldQuestion
from rag.knowledge.chunking import markdown_blocks
from rag.knowledge.models import DocumentFormat, document_format
from tests.bench.test_real_corpus import MANUAL


def test_a_page_puts_each_section_under_its_heading_path() -> None:
    sections = sections_from_source(MANUAL, "user-manual.txt")
    page = render_page(sections)
    assert page.id == "git-doc/user-manual.md"
    assert document_format(page.id, page.document().metadata) == DocumentFormat.MARKDOWN
    # the chapter heading is written although its own text was too short to keep
    assert page.text.startswith(
        "# Git User Manual\n\n## Repositories and Branches\n\n### Creating a new branch\n\n"
    )
    assert "```\n$ git branch new\n```" in page.text
    blocks = markdown_blocks(page.text)
    for section, start, end in page.spans:
        own = next(b for b in blocks if b.start == start)
        assert own.is_heading and own.path == next(s.path for s in sections if s.id == section)
        body = [b for b in blocks if start <= b.start < end and not b.is_heading]
        assert body and page.section_at(body[-1].end - 1) == section
    first, second = page.spans[0], page.spans[1]
    assert first[2] <= second[1] and page.section_at(0) == "git-doc/user-manual.md#preamble"


def test_citations_are_mapped_to_the_numbered_passages() -> None:
    assert citations("Use it [2]. Also [1, 3] and [2] again; not [x].") == [2, 1, 3]
    gold = GoldQuestion("q?", "doc-a", "the gold paragraph")
    shown = [("doc-b", "something else"), ("doc-a", "text with the gold  paragraph inside")]
    good = judge("It is so [2].", shown, gold)
    wrong = judge("It is so [1] and [7].", shown, gold)
    silent = judge("It is so.", shown, gold)
    assert (good.gold_cited, good.valid, good.invalid) == (True, 1, 0)
    assert (wrong.gold_cited, wrong.valid, wrong.invalid) == (False, 1, 1)
    assert silent.citations == [] and silent.gold_in_prompt
    summary = summarize([good, wrong, silent])
    assert summary.to_json() == {
        "n": 3,
        "gold_in_prompt": 1.0,
        "cited": 0.667,
        "invalid_citations": 0.333,
        "cited_gold": 0.333,
        "cited_gold_of_citing": 0.5,
        "citation_precision": 0.5,
    }
