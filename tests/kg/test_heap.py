"""``kg.heap``: the heap is handed back after each change and after a start's graph is
made ready for changes, and the cyclic collector is paused while it is (what they save
is measured by ``bench.kg_memory``, not here)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

import kg.heap
import kg.store
from kg import EmbedFn, KnowledgeGraph
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
    graph.replace_documents({"a": supplied("a", ("Lyon", "lies on", "Rhone"))})
    graph.remove_documents(["a"])
    assert calls == [0, 0]
    graph.replace_documents({"b": supplied("b", ("Ada", "wrote", "Notes"))})
    graph.close()
    again = KnowledgeGraph(tmp_path / "kg", embed_fn, load=False)  # after a clean stop
    again.load(prepare=False)
    calls.clear()
    again.remove_documents(["b"])  # makes the graph ready for changes, then changes it
    assert calls == [0, 0]


def test_without_malloc_trim_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kg.heap, "_trim", None)
    kg.heap.trim()  # a C library without it (musl, macOS): no error


def test_the_collector_is_paused_while_a_start_builds_and_runs_after(
    tmp_path: Path, embed_fn: EmbedFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = KnowledgeGraph(tmp_path / "kg", embed_fn)
    graph.replace_documents({"a": supplied("a", ("Lyon", "lies on", "Rhone"))})
    graph.close()
    seen: list[bool] = []
    table_vectors = kg.store.snapshot_file.table_vectors

    def recording(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return table_vectors(*args)

    monkeypatch.setattr(kg.store.snapshot_file, "table_vectors", recording)
    again = KnowledgeGraph(tmp_path / "kg", embed_fn, load=False)  # after a clean stop
    again.load(prepare=False)
    assert gc.isenabled()
    again.remove_documents(["a"])  # makes the graph ready for changes first
    assert seen == [False] and gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with kg.heap.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
