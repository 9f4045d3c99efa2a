"""Data that crosses the retrieval layer's boundaries, and the checks on text that enters it.

Text that warmrag stores or sends to vLLM must be valid Unicode without NUL characters: a
lone surrogate (``"\\ud800"`` in JSON) cannot be encoded as UTF-8 and a NUL ends strings in
C code downstream. ``loads_json`` is the one JSON reader for input (HTTP bodies, ``.jsonl``
files): it refuses NaN and Infinity, numbers out of range, deep nesting, and such text,
naming where the problem is.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from kg.models import TripleValidationError, validate_triples

MAX_DOC_ID_CHARS = 512
MAX_DOCUMENT_CHARS = 1_000_000
MAX_METADATA_JSON_CHARS = 4_000
MAX_TRIPLES_PER_DOCUMENT = 1_000
#: Deepest nesting of arrays and objects accepted in any JSON input.
MAX_JSON_DEPTH = 32
_INT64 = 2**63

_SURROGATE = re.compile("[\ud800-\udfff]")

Loc = tuple[str | int, ...]


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored or sent as text, or None when it can."""
    if (nul := value.find("\x00")) >= 0:
        return f"contains a NUL character (U+0000) at position {nul}"
    if match := _SURROGATE.search(value):
        return (
            f"contains a lone surrogate U+{ord(match.group()):04X} at position "
            f"{match.start()}: not valid Unicode"
        )
    return None


def _check_text(value: str) -> str:
    if problem := text_problem(value):
        raise ValueError(f"text {problem}")
    return value


#: A ``str`` that ``text_problem`` accepts.
CleanText = Annotated[str, AfterValidator(_check_text)]


def doc_id_problem(doc_id: str) -> str | None:
    """Why ``doc_id`` is not a document id, or None: 1 to ``MAX_DOC_ID_CHARS`` printable
    characters (``str.isprintable``: no control, format, surrogate or unassigned
    characters), without leading or trailing whitespace. Anything else goes: ``/``, ``#``,
    ``?``, ``%``, spaces inside, any script."""
    if not doc_id:
        return "is empty"
    if len(doc_id) > MAX_DOC_ID_CHARS:
        return f"is {len(doc_id)} characters long; at most {MAX_DOC_ID_CHARS}"
    if not doc_id.isprintable():
        position, char = next((i, c) for i, c in enumerate(doc_id) if not c.isprintable())
        return f"has an unprintable character U+{ord(char):04X} at position {position}"
    if doc_id != doc_id.strip():
        return "has leading or trailing whitespace"
    return None


def _check_doc_id(value: str) -> str:
    if problem := doc_id_problem(value):
        raise ValueError(f"document id {problem}")
    return value


DOC_ID_DESCRIPTION = (
    f"1-{MAX_DOC_ID_CHARS} printable characters, no leading or trailing whitespace "
    "(e.g. 'guide/install.md', 'faq/general#q3'); percent-encode it in URLs."
)

#: A document id (see ``doc_id_problem``); ids are hashed, never joined into file paths.
DocId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_DOC_ID_CHARS),
    AfterValidator(_check_doc_id),
]


# ----- JSON input -------------------------------------------------------------------------


class JSONInputError(ValueError):
    """JSON input that warmrag refuses; ``loc`` is the path to the bad value."""

    def __init__(self, loc: Loc, message: str) -> None:
        self.loc = loc
        self.message = message
        super().__init__(f"{describe_loc(loc)}: {message}" if loc else message)


def describe_loc(loc: Loc) -> str:
    """``("metadata", "tags", 0)`` -> ``metadata.tags[0]``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def json_problems(value: Any, loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """Every value inside decoded JSON (or a Python value bound for JSON) that warmrag would
    refuse to store: bad text (``text_problem``) in keys or strings, non-finite numbers,
    integers outside 64 bits, nesting deeper than ``MAX_JSON_DEPTH``."""
    stack: list[tuple[Loc, Any]] = [(loc, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if problem := text_problem(item):
                yield where, f"text {problem}"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -_INT64 <= item < _INT64:
                yield where, "integer is outside the 64-bit range"
        elif isinstance(item, float):
            if not math.isfinite(item):
                yield where, "number is not finite (NaN and Infinity are not JSON)"
        elif len(where) - len(loc) >= MAX_JSON_DEPTH:
            yield where, f"nested more than {MAX_JSON_DEPTH} levels deep"
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    yield where, f"object key {key!r} is not a string"
                elif problem := text_problem(key):
                    yield (*where, key[:40].encode("utf-8", "replace").decode()), f"key {problem}"
                else:
                    stack.append(((*where, key), child))
        elif isinstance(item, list | tuple):
            stack.extend(((*where, i), child) for i, child in enumerate(item))
        else:
            yield where, f"{type(item).__name__} is not a JSON value"


def _reject_constant(name: str) -> Any:
    raise JSONInputError((), f"{name} is not valid JSON (numbers must be finite)")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise JSONInputError((), f"number {text[:30]} is out of range")
    return number


def loads_json(data: bytes | str) -> Any:
    """Decode JSON input strictly; ``JSONInputError`` names the first problem and where."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError((), f"body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except JSONInputError:
        raise
    except json.JSONDecodeError as exc:
        problem = f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise JSONInputError((), problem) from None
    except RecursionError:
        raise JSONInputError((), f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
        raise JSONInputError((), f"invalid JSON: {exc}") from None
    for loc, problem in json_problems(value):
        raise JSONInputError(loc, problem)
    return value


class ChunkingStrategy(StrEnum):
    """How documents are cut into chunks (``rag.knowledge.chunking``)."""

    STRUCTURE = "structure"  # Markdown at its headings and blocks; plain text by sentences
    SENTENCE = "sentence"  # llama-index's sentence splitter for everything


#: The one default (``Settings.chunking``, ``KnowledgeBase``, ``rag.knowledge.ingest``).
DEFAULT_CHUNKING = ChunkingStrategy.STRUCTURE


class EmbeddedIndex(StrEnum):
    """The vector index of the embedded deployment (no Qdrant server)."""

    EDGE = "edge"  # Qdrant Edge: HNSW, in a child process (``rag.knowledge.edge``)
    LOCAL = "local"  # Qdrant local mode: brute force, the whole store in memory


class EmbeddingPrecision(StrEnum):
    """The number format the embedding model computes in (``rag.knowledge.embedding``).

    Measured on the real corpus's 1,047 chunks and 245 gold questions (one thread):

    - float32: torch, as every knowledge base before the precisions; the default on a
      CPU without AVX2 and on other architectures. Questions, here and in int8, run on
      ONNX Runtime in their own precision (``QuestionPrecision``).
    - int8: documents on ONNX Runtime, the matrix products quantized with 7-bit weights
      (``rag.knowledge.onnx_model``), questions not so; the default on an x86 CPU
      with AVX2 (``rag.knowledge.embedding.default_precision``). Through the read path
      on the real corpus: about 2x float32's whole ingest (2-core Xeon with VNNI), the
      same recall@3 (0.869), and as many rewordings building a question's prefix (105
      of 244, float32 104) (``docs/performance.md``, "Embeddings in int8").
    - bfloat16, on a CPU with bf16 in hardware (``avx512_bf16``, ``amx_bf16``): 1.78x,
      recall@3 0.857. Without such hardware it is emulated and slower than float32.

    A knowledge base records the precision it was embedded with: an embedder left to
    the default follows it, one asked for another is refused."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"


class QuestionPrecision(StrEnum):
    """The number format a question's embedding computes in (``rag.knowledge.embedding``),
    for knowledge bases embedded in float32 or int8 (bfloat16's questions are bfloat16's).

    - float32: ONNX Runtime in float32, torch's vectors within 2e-7.
    - int8: ONNX Runtime's ``MatMulNBits``, 8-bit weights in blocks of 32 along each
      column, each with its own scale and zero point, and the activations quantized in
      blocks of 32 too (``rag.knowledge.onnx_blocks``). The default on a CPU with VNNI or
      AMX (exact int8 products), outside server mode. On the real corpus (2026-12-06):
      3.9-4.0 ms a question against float32's 5.6, recall@3 0.869 as float32's, and 454
      of its 489 questions and rewordings build float32's prompt prefix.

    Not int8's per-call scales: one scale for a whole question's activations made a
    question and its rewording retrieve different chunks (173 of 245 pairs, float32 194)."""

    FLOAT32 = "float32"
    INT8 = "int8"


class DocumentFormat(StrEnum):
    """How a document's text is written; ``rag.knowledge.chunking`` follows Markdown's structure."""

    MARKDOWN = "markdown"
    TEXT = "text"


#: Metadata naming a document's format; without it, the format follows the suffix of
#: the document's id or of its "source" metadata (``document_format``).
FORMAT_KEY = "markup"
#: HTML files are read into Markdown (``rag.knowledge.readers``); HTML sent as text through the API
#: with such an id is parsed as Markdown as it stands (its tags become HTML blocks).
MARKDOWN_SUFFIXES = (".md", ".markdown", ".html", ".htm")
#: Metadata keys warmrag writes on every chunk (``rag.knowledge.ingest``,
#: ``rag.knowledge.chunking``).
RESERVED_METADATA_KEYS = ("doc_hash", "chunk_index", "heading_path")


def document_format(doc_id: str, metadata: dict[str, Any]) -> DocumentFormat:
    """Declared by ``metadata["markup"]``, else Markdown for an id or source ending in a
    Markdown or HTML suffix, else plain text."""
    declared = metadata.get(FORMAT_KEY)
    if isinstance(declared, str):
        return DocumentFormat(declared)
    names = (doc_id, metadata.get("source"))
    if any(isinstance(n, str) and n.lower().endswith(MARKDOWN_SUFFIXES) for n in names):
        return DocumentFormat.MARKDOWN
    return DocumentFormat.TEXT


class DocumentIn(BaseModel):
    """A document as an operator sends it to the knowledge base."""

    model_config = ConfigDict(strict=True)

    id: DocId = Field(description=DOC_ID_DESCRIPTION)
    text: CleanText = Field(min_length=1, max_length=MAX_DOCUMENT_CHARS)
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description=f"Any JSON object, at most {MAX_METADATA_JSON_CHARS} characters encoded. "
        '"title" is embedded with every chunk; "markup" ("markdown" or "text") says how the '
        'text is chunked, which otherwise follows the suffix of the id or of "source" '
        "(.md, .markdown, .html, .htm: Markdown). doc_hash, chunk_index and heading_path "
        "are reserved.",
    )
    triples: list[Any] = Field(
        default_factory=list,
        max_length=MAX_TRIPLES_PER_DOCUMENT,
        description="[[subject, predicate, object], ...] the caller asserts for this document.",
        json_schema_extra={
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3}
        },
    )

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is blank")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_small_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        for loc, problem in json_problems(value, ("metadata",)):
            raise ValueError(f"{describe_loc(loc)}: {problem}")
        encoded = json.dumps(value)
        if len(encoded) > MAX_METADATA_JSON_CHARS:
            raise ValueError(
                f"metadata is {len(encoded)} chars of JSON; at most {MAX_METADATA_JSON_CHARS}"
            )
        declared = value.get(FORMAT_KEY)
        formats = [f.value for f in DocumentFormat]
        if declared is not None and (not isinstance(declared, str) or declared not in formats):
            allowed = " or ".join(repr(f) for f in formats)
            raise ValueError(f"metadata.{FORMAT_KEY} is {declared!r}; it must be {allowed}")
        if reserved := [k for k in RESERVED_METADATA_KEYS if k in value]:
            raise ValueError(f"metadata.{reserved[0]} is reserved: warmrag sets it on each chunk")
        return value

    @model_validator(mode="after")
    def _valid_triples(self) -> DocumentIn:
        try:
            cleaned = validate_triples(self.triples)
        except TripleValidationError as exc:
            raise ValueError(f"document {self.id!r}: {exc}") from None
        for index, triple in enumerate(cleaned):
            for term in triple:
                if problem := text_problem(term):
                    raise ValueError(f"document {self.id!r}: triple {index}: {problem}")
        self.triples = [list(t) for t in cleaned]
        return self


def duplicate_ids(documents: Iterable[DocumentIn]) -> list[str]:
    """Ids given to more than one of ``documents``, sorted (one request or file may
    not name a document twice: which text would win is undefined)."""
    counts = Counter(d.id for d in documents)
    return sorted(doc_id for doc_id, n in counts.items() if n > 1)


class Passage(BaseModel):
    """One retrieved chunk."""

    doc_id: str
    chunk_id: str
    text: str
    score: float
    content_hash: str = Field("", exclude=True)
    #: The text the prompt shows: the chunk widened to its neighbours (``rag.chat.windows``);
    #: None where widening is off.
    window: str | None = Field(None, exclude=True)


class ChunkRecord(BaseModel):
    """A chunk a change added, with its embedding, for the change detector."""

    doc_id: str
    chunk_id: str
    embedding: list[float]


class ChangeSet(BaseModel):
    """What one ingest or delete did to the knowledge base."""

    added: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    added_chunks: list[ChunkRecord] = Field(default_factory=list, exclude=True)
    removed_chunk_ids: list[str] = Field(default_factory=list)
    kb_version: int
    #: Each added or updated document's new chunks as (chunk_id, text), in document
    #: order (``KnowledgeBase.chunk_texts``' shape): what the graph extracts triples
    #: from (``GraphSync.apply``). Not serialized: a change read back from warmup's
    #: store has none.
    chunk_texts: dict[str, list[tuple[str, str]]] = Field(default_factory=dict, exclude=True)
    #: The vectors of the facts this change brought into the graph that it held nowhere
    #: before (``GraphSync.apply``): what the change rule tests (a fact the graph held
    #: already was a candidate of every retrieval since, and was not chosen where it is
    #: not injected). None where not known (the graph's sync failed, or a change read
    #: back from a store written before they were kept): every fact of its added and
    #: updated documents then counts as new.
    new_facts: list[list[float]] | None = Field(None, exclude=True)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.deleted)


@dataclass(frozen=True)
class StoredChunk:
    """One chunk as the docstore keeps it; ``start`` is its offset in the document's
    text (None where the splitter did not record it)."""

    chunk_id: str
    text: str
    start: int | None
    #: The section it is in ("Guide > Merging"), and its document's title, where known.
    heading_path: str | None = None
    title: str | None = None
