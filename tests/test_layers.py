"""Imports flow one way (docs/architecture.md): each layer imports only the layers below
it. Read from the source with ``ast``, so a function-level import counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Layer -> the project layers it may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "durable": set(),
    "kg": {"durable"},
    "rag.knowledge": {"kg", "durable"},
    "rag.llm": set(),
    "rag.chat": {"rag.knowledge", "rag.llm", "kg", "durable"},
    "warmup": {"rag.chat", "rag.knowledge", "rag.llm", "kg", "durable"},
    "api": {"warmup", "rag.chat", "rag.knowledge", "rag.llm", "kg", "durable"},
    "bench": {"api", "warmup", "rag.chat", "rag.knowledge", "rag.llm", "kg", "durable"},
}
PROJECT = ("durable", "kg", "rag", "warmup", "api", "bench")


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to (None: not the project's)."""
    parts = module.split(".")
    if parts[0] not in PROJECT:
        return None
    if parts[0] == "rag":
        return ".".join(parts[:2]) if len(parts) > 1 else "rag"
    return parts[0]


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            # ``from rag import chat`` names a subpackage
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> list[Path]:
    return sorted(p for pkg in PROJECT for p in (ROOT / pkg).rglob("*.py"))


def test_the_layers_are_as_documented() -> None:
    assert {layer_of(module_name(p)) for p in modules()} >= (set(ALLOWED) | {"rag"})


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_runs_against_the_layers(path: Path) -> None:
    own = layer_of(module_name(path))
    assert own is not None
    if own == "rag":  # rag/__init__.py: the umbrella imports nothing
        assert not [m for m in imports_of(path) if layer_of(m)]
        return
    wrong = sorted(
        {
            m
            for m in imports_of(path)
            if (layer := layer_of(m)) is not None
            and layer != own
            and layer != "rag"
            and layer not in ALLOWED[own]
        }
    )
    assert not wrong, f"{path.relative_to(ROOT)} ({own}) imports {wrong} against the layers"


def test_the_check_sees_a_back_edge() -> None:
    """The check itself: a knowledge module importing the chat layer is caught."""
    assert layer_of("rag.chat.prompt") == "rag.chat"
    assert "rag.chat" not in ALLOWED["rag.knowledge"]
    assert layer_of("bench.suite") not in ALLOWED["api"]
