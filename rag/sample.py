"""The bundled sample knowledge base (``rag/sample_kb/*.md``) and file loading.

A Markdown file is one document; its id is the file name without extension and
its title the first heading.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from rag.models import DocumentIn

SAMPLE_KB_DIR = Path(__file__).resolve().parent / "sample_kb"
SUPPORTED_SUFFIXES = (".txt", ".md", ".jsonl")


class DocumentFileError(ValueError):
    """A file could not be read as documents; the message names file and line."""


def _title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip() or None
    return None


def documents_from_file(path: Path) -> Iterator[DocumentIn]:
    """``.txt``/``.md``: one document per file; ``.jsonl``: one ``DocumentIn`` per line."""
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DocumentFileError(
            f"{path}: unsupported file type (use {', '.join(SUPPORTED_SUFFIXES)})"
        )
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield DocumentIn.model_validate(json.loads(line))
                except ValueError as exc:
                    raise DocumentFileError(f"{path}:{number}: {exc}") from exc
        return
    text = path.read_text(encoding="utf-8")
    metadata: dict[str, str] = {"source": path.name}
    if title := _title(text):
        metadata["title"] = title
    doc_id = "".join(c if c.isalnum() or c in "._-" else "-" for c in path.stem)[:200]
    try:
        yield DocumentIn(id=doc_id, text=text, metadata=metadata)
    except ValueError as exc:
        raise DocumentFileError(f"{path}: {exc}") from exc


def load_sample_documents() -> list[DocumentIn]:
    return [doc for path in sorted(SAMPLE_KB_DIR.glob("*.md")) for doc in documents_from_file(path)]
