"""Data that crosses the retrieval layer's boundaries."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from kg.models import TripleValidationError, validate_triples

DOC_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$"
MAX_DOCUMENT_CHARS = 1_000_000
MAX_METADATA_JSON_CHARS = 4_000
MAX_TRIPLES_PER_DOCUMENT = 1_000

_DOC_ID_RE = re.compile(DOC_ID_PATTERN)


class DocumentIn(BaseModel):
    """A document as an operator sends it to the knowledge base."""

    id: str = Field(
        pattern=DOC_ID_PATTERN,
        description="1-200 chars: letters, digits and . _ : @ - (it appears in URLs).",
    )
    text: str = Field(min_length=1, max_length=MAX_DOCUMENT_CHARS)
    metadata: dict[str, Any] = Field(default_factory=dict)
    triples: list[Any] = Field(
        default_factory=list,
        max_length=MAX_TRIPLES_PER_DOCUMENT,
        description="[[subject, predicate, object], ...] the caller asserts for this document.",
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
        try:
            encoded = json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be JSON-serializable: {exc}") from exc
        if len(encoded) > MAX_METADATA_JSON_CHARS:
            raise ValueError(
                f"metadata is {len(encoded)} chars of JSON; at most {MAX_METADATA_JSON_CHARS}"
            )
        return value

    @model_validator(mode="after")
    def _valid_triples(self) -> DocumentIn:
        try:
            cleaned = validate_triples(self.triples)
        except TripleValidationError as exc:
            raise ValueError(f"document {self.id!r}: {exc}") from None
        self.triples = [list(t) for t in cleaned]
        return self


def is_valid_doc_id(doc_id: str) -> bool:
    return bool(_DOC_ID_RE.match(doc_id))


class Passage(BaseModel):
    """One retrieved chunk."""

    doc_id: str
    chunk_id: str
    text: str
    score: float
    content_hash: str = Field("", exclude=True)


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

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.deleted)
