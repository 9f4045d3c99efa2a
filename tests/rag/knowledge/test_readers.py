"""Reading document files: HTML and PDF text and titles, and files that cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from rag.knowledge.files import DocumentFileError, documents_from_file
from rag.knowledge.readers import FileText, UnreadableFileError, read_document

HTML = b"""<!doctype html><html><head><title>The Zorn</title>
<style>p { color: red }</style><script>var x = "not text";</script></head>
<body><nav>Home</nav><h1>The river Zorn</h1>
<p>The river Zorn flows through <b>Kellerby</b>.</p><ul><li>one</li><li>two</li></ul>
</body></html>"""


def read_file(path: Path) -> FileText:
    """A file's text and title, read as an upload or ``documents_from_file`` reads it."""
    return read_document(path.name, path.read_bytes())


def write_pdf(path: Path, text: str | None, title: str | None = None) -> Path:
    """A one-page PDF with ``text`` in its text layer (none: a page with no text)."""
    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    if text is not None:
        font = DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
        fonts = DictionaryObject({NameObject("/F1"): writer._add_object(font)})
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
        content = DecodedStreamObject()
        content.set_data(f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(content)
    if title:
        writer.add_metadata({"/Title": title})
    writer.write(path)
    return path


def test_html_text_without_scripts_styles_or_head(tmp_path: Path) -> None:
    page = tmp_path / "zorn.html"
    page.write_bytes(HTML)
    read = read_file(page)
    assert read.title == "The Zorn"
    assert "# The river Zorn\n\nThe river Zorn flows through Kellerby." in read.text
    assert "color" not in read.text and "not text" not in read.text
    assert read.text.splitlines()[-2:] == ["- one", "- two"]
    # no <title>: the first heading
    page.write_bytes(b"<h1>Only a heading</h1><p>Body.</p>")
    assert read_file(page).title == "Only a heading"


def test_html_structure_is_read_as_markdown_without_escapes(tmp_path: Path) -> None:
    """Headings, code and tables reach the structure-aware chunker; exact terms stay as
    the page writes them."""
    page = tmp_path / "cli.html"
    page.write_bytes(
        b"<h1>CLI</h1><h2>Flags</h2><p>Pass <code>--no-edit</code> to <a href='#'>"
        b"parse_args</a>.</p><pre><code>$ tool --no-edit\n# a comment</code></pre>"
        b"<table><tr><th>flag</th></tr><tr><td>-q</td></tr></table>"
    )
    text = read_file(page).text
    assert text.startswith("# CLI\n\n## Flags\n\nPass `--no-edit` to parse_args.")
    assert "```\n$ tool --no-edit\n# a comment\n```" in text
    assert "| flag |\n| --- |\n| -q |" in text


def test_html_nested_too_deeply_for_markdown_is_read_as_plain_text(tmp_path: Path) -> None:
    """Fault injected: 3,000 nested elements, past markdownify's recursion (a 500 before
    this fallback); the text is read without its structure."""
    page = tmp_path / "deep.html"
    page.write_bytes(b"<h1>Deep</h1>" + b"<div>" * 3000 + b"deep text" + b"</div>" * 3000)
    text = read_file(page).text
    assert "deep text" in text and "Deep" in text


def test_pdf_text_and_title(tmp_path: Path) -> None:
    read = read_file(write_pdf(tmp_path / "z.pdf", "The river Zorn flows.", "The Zorn"))
    assert read == read.__class__("The river Zorn flows.", "The Zorn")


def test_pdfs_without_text_or_not_pdfs_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError, match="no text layer"):
        read_file(write_pdf(tmp_path / "scan.pdf", None))
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 not really")
    with pytest.raises(DocumentFileError, match=r"broken\.pdf: not a readable PDF"):
        list(documents_from_file(broken, tmp_path))


def test_each_file_kind_is_one_document_with_its_title(tmp_path: Path) -> None:
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "zorn.html").write_bytes(HTML)
    write_pdf(tmp_path / "guide" / "zorn.pdf", "The Zorn in print.", "Printed Zorn")
    (tmp_path / "notes.md").write_text("# Notes\n\nText.\n")
    docs = [
        doc
        for name in ("guide/zorn.html", "guide/zorn.pdf", "notes.md")
        for doc in documents_from_file(tmp_path / name, tmp_path)
    ]
    assert [(d.id, d.metadata["title"]) for d in docs] == [
        ("guide/zorn.html", "The Zorn"),
        ("guide/zorn.pdf", "Printed Zorn"),
        ("notes.md", "Notes"),
    ]
    assert docs[1].text == "The Zorn in print."
