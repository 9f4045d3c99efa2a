"""The input checks on their own (through HTTP: ``tests/api/test_input.py``)."""

from __future__ import annotations

import pytest

from rag.knowledge.input_checks import (
    MAX_DOC_ID_CHARS,
    MAX_JSON_DEPTH,
    JSONInputError,
    describe_loc,
    doc_id_problem,
    json_problems,
    loads_json,
    text_problem,
)


def test_text_problem_names_the_character_and_where() -> None:
    assert text_problem("plain text, 中文") is None
    assert text_problem("ab\x00c") == "contains a NUL character (U+0000) at position 2"
    problem = text_problem("a\ud800")
    assert problem is not None and "U+D800 at position 1" in problem


@pytest.mark.parametrize(
    ("doc_id", "expected"),
    [
        ("guide/install.md", None),
        ("faq/general#q3 ?%", None),
        ("", "is empty"),
        (" lead", "has leading or trailing whitespace"),
        ("a\tb", "has an unprintable character U+0009 at position 1"),
        ("x" * (MAX_DOC_ID_CHARS + 1), f"characters long; at most {MAX_DOC_ID_CHARS}"),
    ],
)
def test_doc_id_problem(doc_id: str, expected: str | None) -> None:
    problem = doc_id_problem(doc_id)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


def test_loads_json_reads_valid_input() -> None:
    assert loads_json(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}


@pytest.mark.parametrize(
    ("data", "loc", "needle"),
    [
        (b'{"a": NaN}', (), "NaN is not valid JSON"),
        (b'{"a": 1e999}', (), "out of range"),
        (b'{"a": [1, 99999999999999999999]}', ("a", 1), "64-bit"),
        (b'{"a": {"b": "\\u0000"}}', ("a", "b"), "NUL"),
        (b'{"a": "\\ud800"}', ("a",), "lone surrogate"),
        (b"\xff", (), "not UTF-8"),
        (b'{"a": ', (), "invalid JSON"),
        (b"[" * (MAX_JSON_DEPTH + 2) + b"]" * (MAX_JSON_DEPTH + 2), None, "levels deep"),
    ],
)
def test_loads_json_names_the_problem_and_where(
    data: bytes, loc: tuple[str | int, ...] | None, needle: str
) -> None:
    with pytest.raises(JSONInputError) as caught:
        loads_json(data)
    assert needle in caught.value.message
    if loc is not None:
        assert caught.value.loc == loc


def test_json_problems_walks_python_values() -> None:
    found = dict(json_problems({"k": [1.0, float("inf"), {"x\x00": 1}], "o": object()}))
    assert "not finite" in found[("k", 1)]
    assert "NUL" in found[("k", 2, "x\x00")]
    assert "is not a JSON value" in found[("o",)]
    assert describe_loc(("metadata", "tags", 0)) == "metadata.tags[0]"
