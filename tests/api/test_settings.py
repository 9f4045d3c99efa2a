"""``WARMRAG_WARMUP_*`` environment variables set the nested ``Settings.warmup`` fields."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

import pytest

from api.config import Settings
from warmup.settings import WarmupSettings

README = Path(__file__).resolve().parents[2] / "README.md"

# A value unlike each field's default, as the environment would spell it.
SAMPLES: dict[type, tuple[str, object]] = {
    bool: ("false", False),
    int: ("7", 7),
    float: ("0.25", 0.25),
}


def documented_warmup_variables() -> list[str]:
    return re.findall(r"^\| `(WARMRAG_WARMUP_[A-Z_]+)` \|", README.read_text(), re.MULTILINE)


def test_every_documented_warmup_variable_is_a_field() -> None:
    names = documented_warmup_variables()
    assert "WARMRAG_WARMUP_TTL_S" in names and "WARMRAG_WARMUP_ENABLED" in names
    fields = {f"WARMRAG_WARMUP_{name.upper()}" for name in WarmupSettings.model_fields}
    assert set(names) == fields


@pytest.mark.parametrize("variable", documented_warmup_variables())
def test_the_environment_sets_the_nested_field(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = variable.removeprefix("WARMRAG_WARMUP_").lower()
    annotation = WarmupSettings.model_fields[name].annotation
    expected: object
    if name == "strategy":
        raw, expected = "hybrid", "hybrid"
    elif name == "synthetic_queries":
        raw, expected = '["Why?", "How?"]', ("Why?", "How?")
    elif name == "budget_share":
        raw, expected = "0.2", 0.2
    elif name == "entry_max_tokens":
        raw, expected = "1536", 1536
    elif isinstance(annotation, type) and issubclass(annotation, Enum):
        default = WarmupSettings.model_fields[name].default
        member = next(m for m in annotation if m != default)  # a value unlike the default
        raw, expected = str(member.value), member
    else:
        assert annotation in SAMPLES, (name, annotation)
        raw, expected = SAMPLES[annotation]
    monkeypatch.setenv(variable, raw)
    assert getattr(Settings().warmup, name) == expected


def test_keywords_use_the_environment_names_and_win_over_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WARMRAG_WARMUP_TTL_S", "5")
    monkeypatch.setenv("WARMRAG_WARMUP_STRATEGY", "hot_queries")
    monkeypatch.setenv("WARMRAG_TOP_K", "4")
    settings = Settings(warmup_ttl_s=9, warmup_debounce_s=0.5)
    assert settings.warmup.ttl_s == 9 and settings.warmup.debounce_s == 0.5
    assert settings.warmup.strategy == "hot_queries"
    assert settings.top_k == 4  # the rest of Settings is read as before
    assert not hasattr(settings, "warmup_ttl_s")
