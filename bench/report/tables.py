"""Markdown table helpers shared by the report's sections."""

from __future__ import annotations

from collections.abc import Sequence


def row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [row(header), row(["---"] * len(header)), *(row(r) for r in rows), ""]
