"""Entity-name normalization (real spaCy tokenizer and lemma tables)."""

from __future__ import annotations

import pytest

from kg import default_normalizer, normalize_entity


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Marie Curie", "marie curie"),
        ("  Marie \n  Curie ", "marie curie"),
        ("The Nobel Prizes", "nobel prize"),
        ("a Nobel prize", "nobel prize"),
        ("Curie's laboratory", "curie laboratory"),
        ("Children", "child"),
        ("physics", "physics"),  # a known noun ending in -s stays whole
        ("The", "the"),  # never an empty key
    ],
)
def test_normalize_entity(name: str, key: str) -> None:
    assert normalize_entity(name) == key


def test_question_ngrams_include_names_and_skip_stop_words() -> None:
    keys = list(default_normalizer().candidate_keys("Where was Marie Curie born?"))
    assert "marie curie" in keys
    assert "curie" in keys
    assert "where" not in keys
    assert "was marie" not in keys


def test_question_ngrams_use_the_same_lemmas_as_node_keys() -> None:
    keys = set(default_normalizer().candidate_keys("Which Nobel Prizes did she win?"))
    assert normalize_entity("the Nobel Prize") in keys
