"""The bundled sample knowledge base (``rag/sample_kb/*.md``) and file loading.

A ``.txt`` or ``.md`` file is one document; its id is its path relative to the folder it
was found in, with ``/`` between folders and the suffix kept (``guide/install.md``), so
files of the same name in different folders, or with different suffixes, never share an
id. A Markdown document's title is its first heading.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rag.models import DocumentIn, loads_json

SAMPLE_KB_DIR = Path(__file__).resolve().parent / "sample_kb"
SUPPORTED_SUFFIXES = (".txt", ".md", ".jsonl")


class DocumentFileError(ValueError):
    """A file could not be read as documents; the message names file and line."""


def _title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip() or None
    return None


def documents_from_file(path: Path, root: Path | None = None) -> Iterator[DocumentIn]:
    """``.txt``/``.md``: one document per file, its id the path relative to ``root``
    (default: the file's folder); ``.jsonl``: one ``DocumentIn`` per line."""
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DocumentFileError(
            f"{path}: unsupported file type (use {', '.join(SUPPORTED_SUFFIXES)})"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if suffix == ".jsonl":
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                yield DocumentIn.model_validate(loads_json(line))
            except ValueError as exc:
                raise DocumentFileError(f"{path}:{number}: {exc}") from exc
        return
    doc_id = path.relative_to(root).as_posix() if root is not None else path.name
    metadata: dict[str, str] = {"source": doc_id}
    if title := _title(text):
        metadata["title"] = title
    try:
        yield DocumentIn(id=doc_id, text=text, metadata=metadata)
    except ValueError as exc:
        raise DocumentFileError(f"{path}: {exc}") from exc


def load_sample_documents() -> list[DocumentIn]:
    return [
        doc
        for path in sorted(SAMPLE_KB_DIR.glob("*.md"))
        for doc in documents_from_file(path, SAMPLE_KB_DIR)
    ]
