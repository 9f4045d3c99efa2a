"""The session's ordering: the modules that use the vLLM server run last, whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.session_vllm import vllm_modules_last


@dataclass
class Item:
    module: str
    name: str
    fixturenames: tuple[str, ...] = ()


def test_the_modules_that_use_vllm_move_last_whole_and_in_order() -> None:
    items = [
        Item("a", "a1"),
        Item("b", "b1"),
        Item("b", "b2", ("vllm", "tmp_path")),
        Item("b", "b3"),
        Item("c", "c1"),
        Item("d", "d1", ("service", "vllm")),
        Item("e", "e1"),
    ]
    ordered = cast(list[pytest.Item], list(items))
    vllm_modules_last(ordered)
    names = [cast(Any, item).name for item in ordered]
    assert names == ["a1", "c1", "e1", "b1", "b2", "b3", "d1"]


def test_no_module_uses_vllm_keeps_the_order() -> None:
    items = cast(list[pytest.Item], [Item("a", "a1"), Item("b", "b1"), Item("a", "a2")])
    before = list(items)
    vllm_modules_last(items)
    assert items == before
