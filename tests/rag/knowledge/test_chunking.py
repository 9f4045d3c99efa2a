"""Structure-aware chunks (rag/knowledge/chunking.py): sections, whole blocks, the heading path.

The splitter's logic is checked with a whitespace tokenizer (one token per word, so
sizes are easy to reason about); the last tests run the real embedder's word-pieces
and a real knowledge base.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import Document
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode, TextNode
from pydantic import ValidationError
from qdrant_client import QdrantClient

from rag.knowledge.base import KnowledgeBase
from rag.knowledge.chunking import (
    HEADING_PATH_KEY,
    StructureSplitter,
    heading_path,
    markdown_blocks,
)
from rag.knowledge.embedding import Embedder
from rag.knowledge.ingest import build_pipeline, document_hash, to_llama_document
from rag.knowledge.models import ChunkingStrategy, DocumentFormat, DocumentIn, document_format

STRUCTURE, SENTENCE = ChunkingStrategy.STRUCTURE, ChunkingStrategy.SENTENCE

GUIDE = """# Tide Guide

The guide covers the harbour.

## Moorings

### Winter berths

Boats stay at berth four in winter.

```sh
# not a heading: a comment in a code block
moor --berth 4
```

Setext section
--------------

- first item
- second item
  continues here
"""


def words(text: str) -> list[str]:
    return text.split()


def page(text: str, title: str | None = None, doc_id: str = "page.md") -> Document:
    """A document as the knowledge base hands it to the splitter (title embedded)."""
    metadata = {"title": title} if title else {}
    return to_llama_document(DocumentIn(id=doc_id, text=text, metadata=metadata), "h", ("title",))


def splitter(size: int, overlap: int = 0) -> StructureSplitter:
    return StructureSplitter(size, overlap, words)


def test_blocks_carry_their_heading_path_and_code_is_not_a_heading() -> None:
    blocks = markdown_blocks(GUIDE)
    kinds = [b.kind for b in blocks]
    assert kinds == [
        "heading_open", "paragraph_open", "heading_open", "heading_open", "paragraph_open",
        "fence", "heading_open", "bullet_list_open",
    ]  # fmt: skip
    assert blocks[5].path == ("Tide Guide", "Moorings", "Winter berths")
    assert blocks[7].path == ("Tide Guide", "Setext section")
    for block in blocks:
        assert GUIDE[block.start : block.end] == GUIDE[block.start : block.end].strip()
    assert GUIDE[blocks[5].start : blocks[5].end].endswith("moor --berth 4\n```")


def test_pieces_never_cross_a_heading_and_keep_a_heading_with_its_text() -> None:
    pieces = splitter(200).pieces(GUIDE)
    texts = [GUIDE[p.start : p.end] for p in pieces]
    assert texts[0] == "# Tide Guide\n\nThe guide covers the harbour."
    # "## Moorings" has no text of its own: it opens the next piece with its child
    assert texts[1].startswith("## Moorings\n\n### Winter berths\n\nBoats stay")
    assert texts[1].endswith("moor --berth 4\n```")
    assert texts[2].startswith("Setext section\n---") and texts[2].endswith("continues here")
    assert [p.path[-1] for p in pieces] == ["Tide Guide", "Winter berths", "Setext section"]


def test_a_block_that_fits_is_never_cut() -> None:
    """The sentence splitter would cut this list after its twelfth word; blocks are
    packed whole, so the list starts a chunk of its own."""
    para = " ".join(["word"] * 10)
    items = "\n".join(f"- item {i} of the list" for i in range(4))  # 20 words
    text = f"{para}\n\n{items}\n\n{para}"
    pieces = splitter(25).pieces(text)
    assert [text[p.start : p.end] for p in pieces] == [para, items, para]


def test_a_block_longer_than_a_chunk_is_split_and_every_chunk_fits() -> None:
    long = " ".join(f"Sentence {i} is here." for i in range(60))
    text = f"# Long\n\n## Part\n\n{long}"
    parser = splitter(40, overlap=5)
    nodes = parser([page(text, "Long")])
    assert len(nodes) > 5
    for node in nodes:
        assert len(words(node.get_content(metadata_mode=MetadataMode.EMBED))) <= 40
        assert node.metadata[HEADING_PATH_KEY] == "Part"
        body = node.get_content(metadata_mode=MetadataMode.NONE)
        assert isinstance(node, TextNode) and node.start_char_idx is not None
        assert text[node.start_char_idx : node.start_char_idx + len(body)] == body


def test_heading_path_is_embedded_but_not_shown_to_the_model() -> None:
    nodes = splitter(200)([page(GUIDE, "Tide Guide")])
    winter = nodes[1]
    assert winter.metadata[HEADING_PATH_KEY] == "Moorings > Winter berths"  # title dropped
    embedded = winter.get_content(metadata_mode=MetadataMode.EMBED)
    assert embedded.startswith("title: Tide Guide\nheading_path: Moorings > Winter berths\n")
    assert "heading_path" not in winter.get_content(metadata_mode=MetadataMode.LLM)


def test_a_long_heading_path_keeps_its_innermost_headings() -> None:
    assert heading_path(("Guide", "A", "B"), "guide") == "A > B"
    deep = "\n\n".join(f"{'#' * (i + 1)} " + " ".join(["h"] * 8) + f" {i}" for i in range(5))
    nodes = splitter(80)([page(f"{deep}\n\nThe text.")])
    path = nodes[0].metadata[HEADING_PATH_KEY]
    # a quarter of 80 tokens: the two innermost headings (19 words) fit, three do not
    assert [heading[-1] for heading in path.split(" > ")] == ["3", "4"]
    huge = splitter(80)([page("# " + "long " * 100 + "\n\nThe text.")])
    assert len(words(huge[0].metadata[HEADING_PATH_KEY])) <= 20


def test_line_ends_of_every_kind_map_to_the_right_text() -> None:
    """markdown-it numbers lines after turning CRLF and lone CR into LF; the offsets
    of each block must still point into the original text."""
    text = "# One\r\n\r\nfirst para\r\n\r\n## Two\rsecond para\n\n### Three\n\nthird"
    nodes = splitter(200)([page(text)])
    bodies = [n.get_content() for n in nodes]
    assert bodies == ["# One\r\n\r\nfirst para", "## Two\rsecond para", "### Three\n\nthird"]
    assert [n.metadata.get(HEADING_PATH_KEY) for n in nodes] == [
        "One", "One > Two", "One > Two > Three",
    ]  # fmt: skip


def test_text_markdown_gives_no_block_is_kept() -> None:
    """Link reference definitions make no block: they stay in the chunk before them, and
    a document of nothing else is still chunked (by sentences)."""
    text = "# A\n\nSee [the docs][d].\n\n[d]: https://example.org/docs\n\n## B\n\nMore."
    bodies = [n.get_content() for n in splitter(200)([page(text)])]
    assert bodies == ["# A\n\nSee [the docs][d].\n\n[d]: https://example.org/docs", "## B\n\nMore."]
    only = splitter(200)([page("[d]: https://example.org/docs")])
    assert [n.get_content() for n in only] == ["[d]: https://example.org/docs"]


def test_a_long_title_gives_way_and_no_chunk_outgrows_the_size() -> None:
    """The heading path is dropped before the text is squeezed below its minimum; a
    title that leaves no room at all is refused as the sentence splitter refuses it."""
    text = "# Part\n\n" + " ".join(f"Sentence {i} is here." for i in range(40))
    title = " ".join(["long"] * 26)  # 27 words; with "heading_path: Part" 29 leave 31 < 32
    nodes = splitter(60)([page(text, title)])
    for node in nodes:
        assert len(words(node.get_content(metadata_mode=MetadataMode.EMBED))) <= 60
    assert all(HEADING_PATH_KEY not in n.metadata for n in nodes)
    with pytest.raises(ValueError, match="longer than chunk size"):
        splitter(60)([page(text, " ".join(["long"] * 70))])


def test_markdown_without_headings_packs_paragraphs() -> None:
    text = "\n\n".join(" ".join([f"p{i}"] * 9) for i in range(6))
    pieces = splitter(30).pieces(text)
    assert len(pieces) == 2 and all(p.path == () for p in pieces)
    assert text[pieces[0].start : pieces[1].end] == text


def test_plain_text_is_cut_by_the_sentence_splitter_under_either_strategy() -> None:
    """Text that is not Markdown (no .md or .html id, no declared format) is not read as
    Markdown: its "# comment" and dashed lines stay text, and its chunks, ids and hash
    are the sentence splitter's."""
    text = "Run it:\n\n# clone the tree\ngit clone x\n\nNotes\n-----\n" + "word " * 300
    docs = [page(text, doc_id="notes.txt"), page(text, doc_id="notes.md")]
    structure = splitter(60)(docs)
    sentence = SentenceSplitter(chunk_size=60, chunk_overlap=0, tokenizer=words)(docs[:1])
    plain = [n.get_content() for n in structure if n.ref_doc_id == "notes.txt"]
    assert plain == [n.get_content() for n in sentence]
    assert all(not n.metadata.get(HEADING_PATH_KEY) for n in structure[: len(plain)])
    marked = [n for n in structure if n.ref_doc_id == "notes.md"]
    paths = [n.metadata.get(HEADING_PATH_KEY) for n in marked]
    assert paths[:2] == [None, "clone the tree"] and paths[-1] == "clone the tree > Notes"
    for doc in (
        DocumentIn(id="n.md", text=text),
        DocumentIn(id="n", text=text, metadata={"source": "a/b.HTML"}),
        DocumentIn(id="n.txt", text=text, metadata={"markup": "markdown"}),
    ):
        assert document_hash(doc, STRUCTURE) != document_hash(doc, SENTENCE), doc.id
    txt = DocumentIn(id="notes.txt", text=text)
    assert document_hash(txt, STRUCTURE) == document_hash(txt, SENTENCE)
    assert document_format("a.md", {"markup": "text"}) == DocumentFormat.TEXT


def test_an_unknown_markup_or_a_reserved_key_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match=r"metadata\.markup is 'md'; it must be 'markdown'"):
        DocumentIn(id="a", text="x", metadata={"markup": "md"})
    with pytest.raises(ValidationError, match=r"metadata\.markup is \[\]"):
        DocumentIn(id="a", text="x", metadata={"markup": []})
    with pytest.raises(ValidationError, match=r"metadata\.heading_path is reserved"):
        DocumentIn(id="a", text="x", metadata={"heading_path": "mine"})
    assert DocumentIn(id="a", text="x", metadata={"format": "pdf"}).metadata == {"format": "pdf"}


def test_real_word_pieces_fit_the_embedding_window(embedder: Embedder) -> None:
    pipeline = build_pipeline(embedder, 64, 8, ChunkingStrategy.STRUCTURE)
    nodes = pipeline.transformations[0]([page(GUIDE * 6, "T")])
    assert nodes
    for node in nodes:
        assert len(embedder.tokenizer(node.get_content(metadata_mode=MetadataMode.EMBED))) <= 64


def test_switching_strategy_rechunks_on_the_next_ingest(tmp_path: Path, embedder: Embedder) -> None:
    """A knowledge base written with one strategy and reopened with the other treats a
    re-ingested document as changed, so its chunks follow the new strategy."""
    doc = DocumentIn(id="guide.md", text=GUIDE, metadata={"title": "Tide Guide"})
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    try:
        sentence = KnowledgeBase(
            tmp_path, client, embedder, chunk_tokens=64, chunking=ChunkingStrategy.SENTENCE
        )
        assert sentence.upsert([doc]).added == ["guide.md"]
        assert sentence.upsert([doc]).unchanged == ["guide.md"]
        structure = KnowledgeBase(
            tmp_path, client, embedder, chunk_tokens=64, chunking=ChunkingStrategy.STRUCTURE
        )
        change = structure.upsert([doc])
        assert change.updated == ["guide.md"]
        chunks = structure.chunks("guide.md")
        assert [c.text.split("\n")[0] for c in chunks][:3] == [
            "# Tide Guide", "## Moorings", "Setext section",
        ]  # fmt: skip
        for chunk in chunks:
            assert chunk.start is not None
            assert GUIDE[chunk.start : chunk.start + len(chunk.text)] == chunk.text
        berth = structure.retrieve(embedder.embed_query("Where do boats stay in winter?"), 1)
        assert "berth four" in berth[0].text and HEADING_PATH_KEY not in berth[0].text
    finally:
        client.close()
