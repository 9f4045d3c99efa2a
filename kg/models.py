"""Data shapes of the knowledge graph: triples with provenance, the edge rows the graph's
file stores, scored triples, entity rows.

Also the validation of caller-supplied triples, kept apart from the pydantic models so the API
layer can turn a bad triple into a 422 that names the document and the triple's index.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MAX_TERM_LENGTH = 200
"""Longest subject, predicate or object accepted, in characters after stripping."""

TripleSource = Literal["supplied", "extracted"]

_WHITESPACE = re.compile(r"\s+")

Term = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TERM_LENGTH)
]


def clean_term(text: str) -> str:
    """Strip and collapse internal whitespace: the display form of any triple term."""
    return _WHITESPACE.sub(" ", text).strip()


class Triple(BaseModel):
    """One (subject, predicate, object) fact with the place it came from.

    Subject and object are display names (the surface form the source used); the graph keys
    nodes by their normalized form. ``chunk_id`` is None for triples supplied with a whole
    document rather than found in one of its chunks.
    """

    model_config = ConfigDict(frozen=True)

    subject: Term
    predicate: Term
    object: Term
    doc_id: str = Field(min_length=1)
    chunk_id: str | None = None
    source: TripleSource = "supplied"

    def as_list(self) -> list[str]:
        """The public API form: ``[subject, predicate, object]``."""
        return [self.subject, self.predicate, self.object]

    @property
    def text(self) -> str:
        """The triple as one line of text; this is what gets embedded for ranking."""
        return triple_text(self.subject, self.predicate, self.object)


#: Decimals a selection's scores are rounded to (``kg.subgraph``, ``kg.links``, ``kg.paths``),
#: so that last-bit float noise can never reorder ties.
SCORE_DECIMALS = 6


class ScoredTriple(BaseModel):
    """A triple chosen for a question, with its relevance score (``SCORE_DECIMALS``) and
    provenance."""

    model_config = ConfigDict(frozen=True)

    subject: str
    predicate: str
    object: str
    score: float
    doc_id: str
    chunk_id: str | None = None
    source: TripleSource = "supplied"

    def as_list(self) -> list[str]:
        """The public API form: ``[subject, predicate, object]``."""
        return [self.subject, self.predicate, self.object]


class EntityInfo(BaseModel):
    """A graph node as the admin view shows it."""

    key: str
    name: str
    degree: int


class Neighbourhood(BaseModel):
    """The triples one entity takes part in (a triple from it to itself is outgoing)."""

    entity: EntityInfo
    outgoing: list[Triple] = Field(description="Triples the entity is the subject of.")
    incoming: list[Triple] = Field(description="Triples the entity is the object of.")
    total: int = Field(description="All its triples; the lists hold at most the limit asked.")


class TripleValidationError(ValueError):
    """A supplied triple is malformed; ``index`` is its 0-based position (None: not a list)."""

    def __init__(self, index: int | None, problem: str) -> None:
        self.index = index
        self.problem = problem
        where = "triples" if index is None else f"triple {index}"
        super().__init__(f"{where}: {problem}")


_PARTS = ("subject", "predicate", "object")


def shared(value: str) -> str:
    """``value`` as the one object every equal string shares (``sys.intern``; freed once
    nothing refers to it). The graph repeats document and chunk ids, sources, predicates
    and entity keys and names across its edges, in its rows and in its snapshot; as
    separate objects each cost about 60 bytes."""
    return sys.intern(value)


def triple_text(subject: str, predicate: str, obj: str) -> str:
    """One line of text for a triple (used for embeddings and tie-breaking)."""
    return f"{subject} {predicate} {obj}"


@dataclass(frozen=True, slots=True)
class EdgeRow:
    """One triple of one document, as stored (``position`` orders the document's edges)."""

    doc_id: str
    position: int
    subject: str
    object: str
    predicate: str
    chunk_id: str | None
    source: str
    subject_name: str
    object_name: str

    @classmethod
    def from_attributes(cls, u: str, v: str, key: str, data: Mapping[str, Any]) -> EdgeRow:
        """From a graph edge (its key is "<doc_id>#<position>")."""
        return cls(
            doc_id=str(data["doc_id"]),
            position=int(str(key).rsplit("#", 1)[1]),
            subject=u,
            object=v,
            predicate=str(data["predicate"]),
            chunk_id=data.get("chunk_id"),
            source=str(data.get("source", "supplied")),
            subject_name=str(data["subject_name"]),
            object_name=str(data["object_name"]),
        )

    @classmethod
    def stored(cls, row: Sequence[Any]) -> EdgeRow:
        """From a row of the ``edges`` table (in its column order), with its strings
        shared (``shared``)."""
        doc_id, position, subject, object_, predicate, chunk_id, source, sname, oname = row
        return cls(
            shared(doc_id),
            position,
            shared(subject),
            shared(object_),
            shared(predicate),
            None if chunk_id is None else shared(chunk_id),
            shared(source),
            shared(sname),
            shared(oname),
        )

    @property
    def key(self) -> str:
        """The edge's key in the graph: "<doc_id>#<position>"."""
        return f"{self.doc_id}#{self.position}"

    @property
    def text(self) -> str:
        """The triple text the edge states (what its vector embeds)."""
        return triple_text(self.subject_name, self.predicate, self.object_name)


def validate_triples(raw: object) -> list[tuple[str, str, str]]:
    """Check caller-supplied triples and return them cleaned (stripped, whitespace collapsed).

    ``raw`` must be a list of ``[subject, predicate, object]`` lists (tuples accepted) of
    non-empty strings of at most ``MAX_TERM_LENGTH`` characters after stripping; None means no
    triples. The first problem found raises ``TripleValidationError`` naming the triple index.
    """
    if raw is None:
        return []
    if not isinstance(raw, list | tuple):
        raise TripleValidationError(None, "expected a list of [subject, predicate, object]")
    cleaned: list[tuple[str, str, str]] = []
    for index, item in enumerate(raw):
        if not isinstance(item, list | tuple):
            raise TripleValidationError(
                index, f"expected [subject, predicate, object], got {type(item).__name__}"
            )
        if len(item) != 3:
            raise TripleValidationError(
                index, f"expected 3 items [subject, predicate, object], got {len(item)}"
            )
        terms: list[str] = []
        for part, value in zip(_PARTS, item, strict=True):
            if not isinstance(value, str):
                raise TripleValidationError(
                    index, f"{part} must be a string, got {type(value).__name__}"
                )
            term = clean_term(value)
            if not term:
                raise TripleValidationError(index, f"{part} is empty")
            if len(term) > MAX_TERM_LENGTH:
                raise TripleValidationError(
                    index,
                    f"{part} is longer than {MAX_TERM_LENGTH} characters ({len(term)})",
                )
            terms.append(term)
        cleaned.append((terms[0], terms[1], terms[2]))
    return cleaned


def supplied_triples(doc_id: str, raw: object) -> list[Triple]:
    """Validate caller-supplied triples and wrap them with document-level provenance."""
    return [
        Triple(subject=s, predicate=p, object=o, doc_id=doc_id, chunk_id=None, source="supplied")
        for s, p, o in validate_triples(raw)
    ]
