"""Text and title of a document file: plain text, Markdown, HTML or PDF.

HTML is read with Beautiful Soup (the standard library's parser; scripts, styles and
other non-text elements dropped) into Markdown by markdownify: headings as ``#`` lines,
lists as ``-`` items, ``<pre>`` as fenced code, tables as pipe tables, so that the
structure-aware chunker (``rag.knowledge.chunking``) sees the page's sections. Inline emphasis
and links keep their text only, and nothing is escaped: a passage shows
``parse_args`` and ``--no-edit`` as the page does. PDF is read with pypdf
(each page's text layer). These are the libraries llama-index's own file readers use;
``llama-index-readers-file`` itself imports pandas when it is imported, which warmrag
has no other use for, so the two are called directly.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from markdownify import ATX, MarkdownConverter

#: Suffixes read as one document per file.
TEXT_SUFFIXES = (".txt", ".md", ".html", ".htm", ".pdf")
_NOT_TEXT = ("script", "style", "noscript", "template", "svg", "head")
#: Inline markup whose text is kept without Markdown around it.
_PLAIN_INLINE = ("a", "b", "strong", "i", "em", "u", "img", "span", "abbr", "small")
_MARKDOWN = MarkdownConverter(
    heading_style=ATX,
    bullets="-",
    strip=list(_PLAIN_INLINE),
    escape_asterisks=False,
    escape_underscores=False,
    escape_misc=False,
)


class UnreadableFileError(ValueError):
    """The file cannot be read as a document; the message says why (not its path)."""


@dataclass(frozen=True)
class FileText:
    text: str
    title: str | None = None


def markdown_title(text: str) -> str | None:
    """A Markdown document's first heading."""
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip() or None
    return None


def _tidy(text: str) -> str:
    """Trailing spaces off, runs of blank lines down to one."""
    lines = [line.rstrip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def read_html(data: bytes) -> FileText:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data, "html.parser")
    title_tag = soup.find("title")
    title = title_tag.get_text(" ", strip=True) if title_tag else None
    if not title and (h1 := soup.find("h1")):
        title = h1.get_text(" ", strip=True)
    for tag in soup(_NOT_TEXT):
        tag.decompose()
    body = soup.body or soup
    try:
        text = _MARKDOWN.convert_soup(body)
    except RecursionError:
        # markdownify recurses per element: a page nested some thousand levels deep
        # is read as plain text (bs4 walks it iteratively) rather than refused.
        text = body.get_text("\n")
    return FileText(_tidy(text), title or None)


def read_pdf(data: bytes) -> FileText:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        meta = reader.metadata
    except Exception as exc:
        # pypdf's own errors (PyPdfError, DependencyError for encrypted files) and the
        # TypeError/KeyError/... a damaged file can raise from deep in its parser: the
        # file comes from a user, so any failure to read it is the file's.
        raise UnreadableFileError(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    text = _tidy("\n\n".join(pages))
    if not text:
        raise UnreadableFileError("the PDF has no text layer (a scan needs OCR first)")
    title = (meta.title if meta else None) or None
    return FileText(text, title.strip() if title else None)


def read_document(name: str, data: bytes) -> FileText:
    """The text and title of a file's contents by its name's suffix (one of
    ``TEXT_SUFFIXES``)."""
    suffix = PurePosixPath(name).suffix.lower()
    if suffix == ".pdf":
        return read_pdf(data)
    if suffix in (".html", ".htm"):
        return read_html(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(f"not UTF-8 text (byte {exc.start})") from None
    return FileText(text, markdown_title(text))
