"""The bundled sample knowledge base (``rag/knowledge/sample_kb/*.md``) and file loading.

A ``.txt``, ``.md``, ``.html`` or ``.pdf`` file is one document (``rag.knowledge.readers`` reads
its text and title); its id is its path relative to the folder it was found in, with
``/`` between folders and the suffix kept (``guide/install.md``), so files of the same
name in different folders, or with different suffixes, never share an id. A ``.jsonl``
file holds one document per line, ids given.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from rag.knowledge.input_checks import loads_json
from rag.knowledge.models import DocumentIn
from rag.knowledge.readers import TEXT_SUFFIXES, UnreadableFileError, read_document

SAMPLE_KB_DIR = Path(__file__).resolve().parent / "sample_kb"
SUPPORTED_SUFFIXES = (*TEXT_SUFFIXES, ".jsonl")


def validation_problems(exc: ValidationError) -> str:
    """Each problem as ``field: message``, without the input it quotes."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else str(e["msg"])
        for e in exc.errors(include_input=False, include_url=False)
    )


class DocumentFileError(ValueError):
    """A file could not be read as documents; the message names file and line."""


class UnsupportedFileTypeError(DocumentFileError):
    """The file's suffix is none of ``SUPPORTED_SUFFIXES``."""


def documents_from_file(path: Path, root: Path | None = None) -> Iterator[DocumentIn]:
    """A text file (``TEXT_SUFFIXES``): one document, its id the path relative to
    ``root`` (default: the file's folder), its title in the metadata; ``.jsonl``: one
    ``DocumentIn`` per line."""
    check_suffix(path.name, str(path))
    name = path.relative_to(root).as_posix() if root is not None else path.name
    yield from documents_from_bytes(name, path.read_bytes(), str(path))


def check_suffix(name: str, label: str) -> None:
    """Raise ``DocumentFileError`` unless ``name`` has a supported suffix."""
    if PurePosixPath(name).suffix.lower() not in SUPPORTED_SUFFIXES:
        raise UnsupportedFileTypeError(
            f"{label}: unsupported file type (use {', '.join(SUPPORTED_SUFFIXES)})"
        )


def documents_from_bytes(name: str, data: bytes, label: str | None = None) -> Iterator[DocumentIn]:
    """The documents of a file's contents, read as ``documents_from_file`` reads a file:
    ``name`` is its path relative to its root (``/`` between folders), the id of a text
    file's document; ``label`` names the file in errors (default ``name``)."""
    label = label or name
    check_suffix(name, label)
    if PurePosixPath(name).suffix.lower() == ".jsonl":
        yield from _jsonl_documents(data, label)
        return
    try:
        content = read_document(name, data)
    except UnreadableFileError as exc:
        raise DocumentFileError(f"{label}: {exc}") from None
    metadata: dict[str, str] = {"source": name}
    if content.title:
        metadata["title"] = content.title
    try:
        yield DocumentIn(id=name, text=content.text, metadata=metadata)
    except ValidationError as exc:
        raise DocumentFileError(f"{label}: {validation_problems(exc)}") from None


def _jsonl_documents(data: bytes, label: str) -> Iterator[DocumentIn]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentFileError(f"{label}: not UTF-8 text (byte {exc.start})") from None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            yield DocumentIn.model_validate(loads_json(line))
        except ValidationError as exc:
            raise DocumentFileError(f"{label}:{number}: {validation_problems(exc)}") from None
        except ValueError as exc:  # not JSON
            raise DocumentFileError(f"{label}:{number}: {exc}") from None


def load_sample_documents() -> list[DocumentIn]:
    return [
        doc
        for path in sorted(SAMPLE_KB_DIR.glob("*.md"))
        for doc in documents_from_file(path, SAMPLE_KB_DIR)
    ]


@dataclass
class SourceFile:
    """A file given to ingest: its documents, or why they cannot be read (then none)."""

    path: Path
    documents: list[DocumentIn] = field(default_factory=list)
    error: str | None = None


def _expand(paths: Sequence[Path]) -> list[tuple[Path, Path]]:
    """Each file to read with the root its ids are relative to: a folder given (searched
    recursively, supported suffixes only), or the folder of a file given."""
    files: list[tuple[Path, Path]] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUPPORTED_SUFFIXES)
            files.extend((p, path) for p in found if p.is_file())
        elif path.is_file():
            files.append((path, path.parent))
        else:
            raise DocumentFileError(f"{path}: no such file or folder")
    return files


def read_sources(paths: Sequence[Path]) -> list[SourceFile]:
    """Every file under ``paths``, read and validated. A bad file (or line) is a
    ``SourceFile`` with an ``error`` and no documents; so is a file with a document id
    that an earlier file has (``a/x.md`` and ``b/x.md`` given as two folders). A path
    that does not exist raises ``DocumentFileError``."""
    sources: list[SourceFile] = []
    owner: dict[str, Path] = {}
    for file, root in _expand(paths):
        source = SourceFile(file)
        try:
            docs = list(documents_from_file(file, root))
        except DocumentFileError as exc:
            source.error = str(exc)
            docs = []
        seen: set[str] = set()
        for doc in docs:
            if doc.id in owner:
                source.error = (
                    f"{file}: document id {doc.id!r} is also the id of a document in "
                    f"{owner[doc.id]}; give their common folder instead"
                )
            elif doc.id in seen:
                source.error = f"{file}: document id {doc.id!r} is given twice"
            if source.error:
                docs = []
                break
            seen.add(doc.id)
        owner.update((d.id, file) for d in docs)
        source.documents = docs
        sources.append(source)
    return sources
