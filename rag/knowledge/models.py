"""Data that crosses the retrieval layer's boundaries: documents in, passages and changes
out (their input checks: ``rag.knowledge.input_checks``), and the strategies chosen by
settings as str enums.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kg.models import TripleValidationError, validate_triples
from rag.knowledge.input_checks import (
    DOC_ID_DESCRIPTION,
    MAX_DOCUMENT_CHARS,
    MAX_METADATA_JSON_CHARS,
    MAX_TRIPLES_PER_DOCUMENT,
    CleanText,
    DocId,
    describe_loc,
    json_problems,
    text_problem,
)


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
