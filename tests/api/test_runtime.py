"""The composition root builds everything and touches nothing until ``open``."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import pytest

from api.config import Settings
from api.runtime import Runtime
from rag.knowledge.embedding import Embedder, default_precision
from rag.knowledge.models import DocumentIn, EmbeddingPrecision
from tests.fakes import FakeEngine


def test_runtime_construction_does_no_io(tmp_path: Path) -> None:
    data = tmp_path / "data"
    embedder = Embedder()  # not loaded either: its model loads in warm_up()
    runtime = Runtime(Settings(data_dir=data), embedder=embedder, llm=FakeEngine())
    assert not data.exists()  # no folder, docstore, Qdrant, graph or SQLite file yet
    assert not embedder.loaded
    assert runtime.knowledge.kb is runtime.kb and runtime.warmup is not None

    async def open_and_stop() -> None:
        await runtime.open()
        await runtime.stop()

    asyncio.run(open_and_stop())
    assert (data / "edge").is_dir() and (data / "warmup.sqlite3").is_file()


def test_the_graph_is_prepared_for_changes_by_the_first_change(
    tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    """A start after a clean stop reads the graph's snapshot back and leaves the rest of
    what a change needs (the embedding tables take the snapshot's vectors) to the first
    change: done beside the start, it would slow the start and then the first chats. A
    start that built the graph from its rows (the first, here) has nothing left to do."""
    settings = Settings(data_dir=tmp_path, seed_sample_kb=False)  # seeding is a change

    async def start(doc_id: str, text: str) -> tuple[bool, bool, int]:
        runtime = Runtime(settings, embedder=embedder, llm=FakeEngine())
        await runtime.open()
        runtime.start()
        await runtime.wait_ready()
        assert runtime.phase.value == "ready"
        at_ready = runtime.graph.wait_prepared(timeout=0)
        await runtime.knowledge.ingest([DocumentIn(id=doc_id, text=text)])
        after = runtime.graph.wait_prepared(timeout=0), runtime.graph.edge_count
        await runtime.stop()
        return at_ready, *after

    with caplog.at_level(logging.INFO):
        first = asyncio.run(start("lyon", "Lyon lies on the Rhone. Lyon hosts a festival."))
    assert first[:2] == (True, True) and first[2] > 0
    # The stop says how long it took and where: its graph saved the snapshot (a change).
    stopped = [r.getMessage() for r in caplog.records if r.name == "api.runtime"][-1]
    assert re.fullmatch(
        r"warmrag stopped in [\d.]+ s "
        r"\(warmup [\d.]+ s, the knowledge base and its graph [\d.]+ s\)",
        stopped,
    ), stopped
    assert "the snapshot saved for the next start" in caplog.text
    second = asyncio.run(start("turin", "Turin lies on the Po. Turin hosts a fair."))
    assert second[:2] == (False, True) and second[2] > first[2]


def test_the_fact_choice_is_path_aware_unless_turned_off(tmp_path: Path) -> None:
    """WARMRAG_KG_PATH_AWARE: the selector's weights and the memo's rules go together."""
    on = Runtime(Settings(data_dir=tmp_path), embedder=Embedder(), llm=FakeEngine())
    assert on.selector.path_weights is not None and on.selector.max_gain > 0
    assert on.memo.rule.fact_gain == on.selector.max_gain and on.memo.rule.fact_entities is not None
    off = Runtime(
        Settings(data_dir=tmp_path, kg_path_aware=False), embedder=Embedder(), llm=FakeEngine()
    )
    assert off.selector.path_weights is None and off.selector.max_gain == 0
    assert off.memo.rule.fact_gain == 0 and off.memo.rule.fact_entities is None


def test_a_qdrant_server_keeps_float32_as_the_default_precision(tmp_path: Path) -> None:
    """Server mode stays as it was: instances on other CPUs write the same collection,
    so its default is float32 whatever this CPU's; the embedded default is the host's."""
    remote = Settings(data_dir=tmp_path, qdrant_url="http://127.0.0.1:6333")
    server = Runtime(remote, llm=FakeEngine())
    assert server.embedder.precision is EmbeddingPrecision.FLOAT32 and server.embedder.follows
    embedded = Runtime(Settings(data_dir=tmp_path), llm=FakeEngine())
    assert embedded.embedder.precision is default_precision() and embedded.embedder.follows
    asked = Settings(
        data_dir=tmp_path, qdrant_url="http://127.0.0.1:6333", embedding_precision="int8"
    )
    assert Runtime(asked, llm=FakeEngine()).embedder.precision is EmbeddingPrecision.INT8
