"""Validation of caller-supplied triples and the public triple shapes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kg import (
    MAX_TERM_LENGTH,
    ScoredTriple,
    Triple,
    TripleValidationError,
    supplied_triples,
    validate_triples,
)


def test_valid_triples_are_stripped_and_collapsed() -> None:
    raw = [["  Marie   Curie ", "born in", "Warsaw\n"], ("Paris", "capital of", "France")]
    assert validate_triples(raw) == [
        ("Marie Curie", "born in", "Warsaw"),
        ("Paris", "capital of", "France"),
    ]


def test_none_and_empty_mean_no_triples() -> None:
    assert validate_triples(None) == []
    assert validate_triples([]) == []


def test_term_of_exactly_max_length_is_accepted() -> None:
    long_term = "x" * MAX_TERM_LENGTH
    assert validate_triples([[long_term, "p", "o"]]) == [(long_term, "p", "o")]


@pytest.mark.parametrize(
    ("raw", "index", "needle"),
    [
        ("not a list", None, "expected a list"),
        ([["a", "b", "c"], "abc"], 1, "got str"),
        ([["a", "b"]], 0, "got 2"),
        ([["a", "b", "c", "d"]], 0, "got 4"),
        ([["a", "b", "c"], ["a", 5, "c"]], 1, "predicate must be a string"),
        ([["   ", "b", "c"]], 0, "subject is empty"),
        ([["a", "b", ""]], 0, "object is empty"),
        ([["a", "b", "c"], ["a", "b", "c"], ["a", "b", "o" * 201]], 2, "object is longer than 200"),
    ],
)
def test_invalid_triples_name_index_and_problem(
    raw: object, index: int | None, needle: str
) -> None:
    with pytest.raises(TripleValidationError) as caught:
        validate_triples(raw)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.index == index
    assert needle in str(error)
    if index is not None:
        assert str(error).startswith(f"triple {index}: ")


def test_supplied_triples_carry_document_provenance() -> None:
    triples = supplied_triples("doc-1", [["Marie Curie", "born in", "Warsaw"]])
    assert triples == [
        Triple(
            subject="Marie Curie",
            predicate="born in",
            object="Warsaw",
            doc_id="doc-1",
            chunk_id=None,
            source="supplied",
        )
    ]
    assert triples[0].as_list() == ["Marie Curie", "born in", "Warsaw"]
    assert triples[0].text == "Marie Curie born in Warsaw"


def test_triple_model_rejects_blank_terms() -> None:
    with pytest.raises(ValidationError):
        Triple(subject=" ", predicate="p", object="o", doc_id="d")


def test_scored_triple_public_form() -> None:
    scored = ScoredTriple(subject="s", predicate="p", object="o", score=0.5, doc_id="d")
    assert scored.as_list() == ["s", "p", "o"]
