"""The serving process's start-up heap leaves the cyclic collector's walk
(``api.collector``): ``warmrag serve`` asks for it, and the runtime freezes once its
models are loaded and before its stores open."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

import api.cli
import api.main
from api.cli import main
from api.collector import freeze_start_up_heap
from api.config import Settings
from api.runtime import Runtime
from rag.knowledge.embedding import Embedder
from tests.fakes import FakeEngine


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The test process's heap as the other tests have it, before and after."""
    gc.unfreeze()
    yield
    gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.other: object = self


def _tracked(*objects: object) -> list[bool]:
    ids = {id(o) for o in gc.get_objects()}
    return [id(o) in ids for o in objects]


def test_the_heap_before_is_walked_no_more_and_later_cycles_are_still_freed(
    unfrozen: None,
) -> None:
    before = [object()]
    assert _tracked(before) == [True]
    assert freeze_start_up_heap() > 0  # (the count falls as frozen objects are freed)
    after = [object()]
    assert _tracked(before, after) == [False, True]  # permanent: no collection walks it
    cycle = _Node()  # garbage made after the freeze, in a reference cycle
    gone = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert gone() is None


def test_the_runtime_freezes_after_its_models_load_and_before_its_stores_open(
    unfrozen: None, tmp_path: Path, embedder: Embedder
) -> None:
    settings = Settings(data_dir=tmp_path, seed_sample_kb=False)
    runtime = Runtime(settings, embedder=embedder, llm=FakeEngine(), freeze_heap=True)
    built = [runtime.knowledge, runtime.kb.__dict__]
    opened: list[object] = []

    async def open_and_stop() -> None:
        await runtime.open()
        opened.append(runtime.graph.snapshot)  # read by the stores' open
        assert gc.get_freeze_count() > 0
        await runtime.stop()

    asyncio.run(open_and_stop())
    assert _tracked(*built, *opened) == [False, False, True]


def test_a_runtime_left_as_built_freezes_nothing(
    unfrozen: None, tmp_path: Path, embedder: Embedder
) -> None:
    settings = Settings(data_dir=tmp_path, seed_sample_kb=False)
    runtime = Runtime(settings, embedder=embedder, llm=FakeEngine())

    async def open_and_stop() -> None:
        await runtime.open()
        await runtime.stop()

    asyncio.run(open_and_stop())
    assert gc.get_freeze_count() == 0


def test_serve_builds_an_app_that_freezes_its_heap(
    unfrozen: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARMRAG_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(api.cli, "configure_logging", lambda _format: None)
    asked: dict[str, Any] = {}
    create_app = api.main.create_app

    def recording(settings: Settings, **options: Any) -> object:
        asked.update(options)
        return create_app(settings, **options)

    monkeypatch.setattr(api.main, "create_app", recording)
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: asked.setdefault("served", app))
    assert main(["serve"]) == 0
    assert asked["freeze_heap"] is True and asked["served"] is not None
    assert list(tmp_path.iterdir()) == []  # nothing opened before uvicorn runs the lifespan
