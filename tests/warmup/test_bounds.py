"""Bounded growth: the query log is pruned by decayed count and capped in rows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from rag.chat.change_rule import ContextBars
from rag.chat.query import normalize_query
from rag.knowledge.embedding import Embedder
from tests.warmup.rig import DOCS, QUESTIONS, make_rig
from warmup.heat import Heat
from warmup.jobs import JobQueue
from warmup.models import WarmEntry
from warmup.registry import Registry
from warmup.sweep import Sweeper

HALF_LIFE = 100.0


def sweeper(registry: Registry, now: list[float], max_rows: int = 100) -> Sweeper:
    heat = Heat(registry, half_life_s=HALF_LIFE, hot_min_count=0.5)
    return Sweeper(
        registry=registry,
        heat=heat,
        warmer=None,  # type: ignore[arg-type]  # pruning sends no prefill
        queue=JobQueue(),
        min_count=0.05,
        max_rows=max_rows,
        clock=lambda: now[0],
    )


def entry(fingerprint: str) -> WarmEntry:
    return WarmEntry(
        fingerprint=fingerprint,
        messages=[],
        chunk_ids=[],
        doc_ids=[],
        content_hashes=[],
        triples=[],
        prefix_tokens=10,
        cached_block_tokens=8,
        warmed_at=0.0,
        expires_at=1e9,
    )


def log(registry: Registry, key: str, at: float, *, seed: bool = False) -> None:
    registry.record_query(key, key, np.ones(4), at, HALF_LIFE, seed=seed)


def test_cold_queries_go_unless_seeds_or_backing_an_entry() -> None:
    registry, now = Registry(), [0.0]
    for key in ("cold", "cold seed", "cold backing"):
        log(registry, key, 0.0, seed=key == "cold seed")
    registry.put_entry(entry("fp"))
    registry.assign("cold backing", "fp", ContextBars(0.5))
    now[0] = 5 * HALF_LIFE  # one sighting decayed to 1/32 < 0.05
    log(registry, "warm", now[0])
    assert sweeper(registry, now).prune() == 1
    assert sorted(q.key for q in registry.queries()) == ["cold backing", "cold seed", "warm"]
    assert registry.embedding("cold") is None


def test_past_the_row_cap_the_coldest_loose_queries_go_first() -> None:
    registry, now = Registry(), [0.0]
    registry.put_entry(entry("fp"))
    for i in range(12):
        log(registry, f"q{i:02d}", float(i))  # q00 the coldest, q11 the hottest
    registry.assign("q00", "fp", ContextBars(0.5))  # backs an entry: never pruned
    log(registry, "seed", 0.0, seed=True)  # a seed ranks above unseen heat
    now[0] = 12.0
    assert sweeper(registry, now, max_rows=10).prune() == 4  # 13 rows down to 9
    assert sorted(q.key for q in registry.queries()) == [
        "q00", "q05", "q06", "q07", "q08", "q09", "q10", "q11", "seed",
    ]  # fmt: skip


def test_the_service_keeps_its_query_log_bounded(tmp_path: Path, embedder: Embedder) -> None:
    async def scenario() -> None:
        rig = await make_rig(tmp_path, embedder, query_log_max_rows=4, half_life_s=HALF_LIFE)
        try:
            await rig.ingest(*DOCS)
            await rig.service.flush()
            await rig.service.add_seed_queries([QUESTIONS["zorn"]])  # backs an entry
            for name in ("mars", "rye", "piano", "tea", "owl"):
                await rig.ask(QUESTIONS[name])
                rig.now[0] += 1
            await rig.service.sweep()
            registry = rig.service.registry
            assert registry.query_count() <= 4
            assert registry.query(normalize_query(QUESTIONS["zorn"])) is not None
            assert registry.query(normalize_query(QUESTIONS["owl"])) is not None  # hottest
            rig.now[0] += 10 * HALF_LIFE
            report = await rig.service.sweep()
            assert report.pruned >= 1
            assert [q.key for q in registry.queries()] == [normalize_query(QUESTIONS["zorn"])]
            assert await rig.service.journal.flush(5.0)
            held = rig.service.store.load()
            assert [q.key for q, _ in held.queries] == [normalize_query(QUESTIONS["zorn"])]
        finally:
            await rig.close()

    asyncio.run(scenario())
