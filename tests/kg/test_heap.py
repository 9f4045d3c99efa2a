"""``kg.heap``: the heap is handed back after each change and after what changes edit is
built, and the cyclic collector is paused while a start builds (what they save is
measured by ``bench.kg_memory``, not here)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

import kg.heap
import kg.store
from kg import EmbedFn, KnowledgeGraph
from kg.edits import GraphEdits
from tests.kg.kg_testdata import supplied


def test_a_change_and_a_build_hand_the_heap_back(
    tmp_path: Path, embed_fn: EmbedFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def record(pad: int) -> int:
        calls.append(pad)
        return 1

    monkeypatch.setattr(kg.heap, "_trim", record)
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"a": supplied("a", ("Lyon", "lies on", "Rhone"))})  # builds too
    graph.remove_documents(["a"])
    assert calls == [0, 0, 0]
    graph.replace_documents({"b": supplied("b", ("Ada", "wrote", "Notes"))})
    again = KnowledgeGraph(tmp_path / "kg", embed_fn, load=False)  # after a crash
    again.load(prepare=False)
    calls.clear()
    assert again.triples_for_document("b")  # builds what changes edit
    assert calls == [0]


def test_without_malloc_trim_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kg.heap, "_trim", None)
    kg.heap.trim()  # a C library without it (musl, macOS): no error


def test_the_collector_is_paused_while_a_start_builds_and_runs_after(
    tmp_path: Path, embed_fn: EmbedFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"a": supplied("a", ("Lyon", "lies on", "Rhone"))})
    seen: list[bool] = []
    of_rows = kg.store.GraphEdits.of_rows

    def recording(*args: Any) -> GraphEdits:
        seen.append(gc.isenabled())
        return of_rows(*args)

    monkeypatch.setattr(kg.store.GraphEdits, "of_rows", recording)
    again = KnowledgeGraph(tmp_path / "kg", embed_fn, load=False)  # after a crash
    again.load(prepare=False)
    assert gc.isenabled()
    assert again.triples_for_document("a")  # builds what changes edit
    assert seen == [False] and gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with kg.heap.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
