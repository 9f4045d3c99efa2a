"""The warmup layer's logic end to end against ``FakeEngine`` (no vLLM): real
retrieval, the real registry and job queue, and a fake engine whose prefix cache
says exactly which blocks a prefill left warm."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rag.knowledge.embedding import Embedder
from tests.fakes import FakeEngine, tokens_of
from tests.warmup.rig import DOCS, QUESTIONS, Rig, make_rig, topic

Scenario = Callable[[Rig], Awaitable[None]]


def run(tmp_path: Path, embedder: Embedder, scenario: Scenario, **kwargs: Any) -> None:
    """Run ``scenario`` on a started rig with the documents ingested and detected."""

    async def main() -> None:
        rig = await make_rig(tmp_path, embedder, **kwargs)
        try:
            await rig.ingest(*DOCS)
            await rig.service.flush()
            await scenario(rig)
        finally:
            await rig.close()

    asyncio.run(main())


def test_a_hot_query_gets_a_warm_entry_that_then_hits(tmp_path: Path, embedder: Embedder) -> None:
    async def scenario(rig: Rig) -> None:
        first = await rig.ask(QUESTIONS["zorn"])
        assert first.cache.warm_hit is False  # nothing registered yet
        rig.engine.evict_all()  # what hits next is what warmup prefilled, not this chat
        report = await rig.service.warm_hot()
        assert report.kind == "hot" and report.warm_requests == 1
        entry = rig.entry_for("zorn")
        assert entry.cached_block_tokens > 0 and rig.prefilled(entry) == 1
        again = await rig.ask("what do we know about the RIVER zorn")  # another spelling
        assert again.cache.warm_hit is True
        assert again.cache.cached_tokens >= entry.cached_block_tokens
        assert rig.counter("warmrag_warmup_hits_total") == 1
        assert rig.entry_for("zorn").hits == 1

    run(tmp_path, embedder, scenario)


def test_a_change_rewarms_exactly_the_affected_entry_and_extends_the_rest(
    tmp_path: Path, embedder: Embedder
) -> None:
    async def scenario(rig: Rig) -> None:
        names = ("zorn", "mars", "rye")
        seeded = await rig.service.add_seed_queries([QUESTIONS[n] for n in names])
        assert seeded.warm_requests == 3
        before = {n: rig.entry_for(n) for n in names}
        sent = len(rig.engine.prefills)
        rig.now[0] += 60
        await rig.ingest(topic("zorn-0", "The river Zorn", "The river Zorn is blue."))
        report = await rig.service.flush()
        assert report.kind == "kb_change"
        assert (report.affected, report.warm_requests, report.retired) == (1, 1, 1)
        assert report.extended == 2
        assert len(rig.engine.prefills) == sent + 1  # the one changed context, nothing else
        new = rig.entry_for("zorn")
        assert new.fingerprint != before["zorn"].fingerprint
        assert "blue" in new.messages[0]["content"] and "green" not in new.messages[0]["content"]
        assert before["zorn"].fingerprint not in rig.service.registry
        for name in ("mars", "rye"):
            entry = rig.entry_for(name)
            assert entry.fingerprint == before[name].fingerprint
            assert entry.expires_at == before[name].expires_at + 60
        answer = await rig.ask(QUESTIONS["zorn"])
        assert answer.cache.warm_hit is True
        assert any("blue" in p.text for p in answer.passages)

    run(tmp_path, embedder, scenario)


@pytest.mark.parametrize("eviction", ["evict_all", "lru"])
def test_an_evicted_prefix_is_a_kv_miss_and_is_rewarmed(
    tmp_path: Path, embedder: Embedder, eviction: str
) -> None:
    async def scenario(rig: Rig) -> None:
        await rig.service.add_seed_queries([QUESTIONS["zorn"]])
        entry = rig.entry_for("zorn")
        if eviction == "evict_all":
            rig.engine.evict_all()
        else:  # other contexts' chats push its blocks out of the small cache
            for name in ("mars", "rye", "piano", "tea", "owl"):
                await rig.ask(QUESTIONS[name])
        assert not rig.engine.is_cached(entry.messages)
        missed = await rig.ask(QUESTIONS["zorn"])
        assert missed.cache.warm_hit is False
        assert rig.counter("warmrag_kv_cache_miss_total") == 1
        await rig.service.sweep()  # queued behind the re-warm: it has run
        assert rig.prefilled(entry) == 2  # the seed's, and the re-warm
        evicted = rig.metrics.registry.get_sample_value(
            "warmrag_rewarm_total", {"reason": "evicted"}
        )
        assert evicted == 1
        assert (await rig.ask(QUESTIONS["zorn"])).cache.warm_hit is True

    # "lru": room for about three prompts, and the whole cache may be warm.
    engine = FakeEngine(num_blocks=4096 if eviction == "evict_all" else 100)
    run(tmp_path, embedder, scenario, engine=engine, budget_share=1.0, kv_usage_threshold=1.0)


def test_a_vllm_restart_counts_a_cold_start_and_rewarms_the_hottest_first(
    tmp_path: Path, embedder: Embedder
) -> None:
    async def scenario(rig: Rig) -> None:
        await rig.service.add_seed_queries([QUESTIONS[n] for n in ("zorn", "mars", "rye")])
        for name in ("rye", "rye", "rye", "mars"):
            await rig.ask(QUESTIONS[name])
        entries = [rig.entry_for(n) for n in ("rye", "mars", "zorn")]  # hottest first
        rig.engine.evict_all()  # a restarted vLLM holds nothing
        sent = len(rig.engine.prefills)
        report = await rig.service.start()  # what the runtime does after the restart
        assert rig.counter("warmrag_cold_start_total") == 2
        assert report.kind == "restore" and report.warm_requests == 3
        assert rig.engine.prefills[sent:] == [
            tokens_of(e.messages, generation_prompt=False) for e in entries
        ]
        assert (await rig.ask(QUESTIONS["zorn"])).cache.warm_hit is True

    run(tmp_path, embedder, scenario)


def test_a_change_rewarm_overtakes_a_long_hot_cycle(tmp_path: Path, embedder: Embedder) -> None:
    others = ("mars", "rye", "piano", "tea", "owl")

    async def scenario(rig: Rig) -> None:
        await rig.service.add_seed_queries([QUESTIONS["zorn"]])
        for name in others:
            await rig.ask(QUESTIONS[name])  # hot, not warm yet
        rig.engine.prefill_delay_s = 0.3
        sent = len(rig.engine.prefills)
        hot = asyncio.create_task(rig.service.warm_hot())
        while len(rig.engine.prefills) == sent:
            await asyncio.sleep(0.01)
        await rig.ingest(topic("zorn-0", "The river Zorn", "The river Zorn is blue."))
        queued_at = len(rig.engine.prefills)  # the hot prefill in flight is counted
        assert not hot.done() and queued_at - sent < len(others)
        change = await rig.service.flush()
        assert change.warm_requests == 1
        zorn = rig.entry_for("zorn")
        # Right after the prefill that was in flight, before the rest of the hot cycle.
        assert rig.engine.prefills[queued_at] == tokens_of(zorn.messages, generation_prompt=False)
        report = await hot
        assert report.warm_requests == len(others)  # the rest still warmed, after it
        assert all(rig.prefilled(rig.entry_for(n)) == 1 for n in others)

    run(tmp_path, embedder, scenario)


def test_warm_entries_stay_within_the_budget(tmp_path: Path, embedder: Embedder) -> None:
    async def scenario(rig: Rig) -> None:
        report = await rig.service.add_seed_queries([QUESTIONS[n] for n in ("zorn", "mars", "rye")])
        budget = rig.service.budget
        assert budget is not None and budget.max_tokens == 300
        assert report.skipped_over_budget >= 1
        assert 1 <= rig.service.registry.entry_count() < 3
        assert rig.service.registry.warm_tokens() <= budget.max_tokens

    # 16,384 tokens of KV cache: a share that leaves room for about one entry.
    run(tmp_path, embedder, scenario, budget_share=300 / 16_384)


def test_a_warming_prefill_waits_for_a_chat_prefilling_the_same_context(
    tmp_path: Path, embedder: Embedder
) -> None:
    """A seed's prefill of the context a chat is prefilling is sent after the chat's first
    token, when the context is cached, not beside it (the fake engine holds the chat
    before its first token until released)."""

    async def scenario(rig: Rig) -> None:
        rig.service.warmer.yield_timeout_s = 0.01  # chats alone would hold it 0.01 s
        rig.engine.hang = True
        chat = asyncio.create_task(rig.ask(QUESTIONS["zorn"]))
        while not rig.engine.chats:
            await asyncio.sleep(0.01)
        seeding = asyncio.create_task(rig.service.add_seed_queries([QUESTIONS["zorn"]]))
        await asyncio.sleep(0.3)
        assert rig.engine.prefills == []  # waiting for the chat's first token
        rig.engine.release.set()
        answered = await chat
        assert answered.cache.warm_hit is False
        report = await seeding
        assert report.warm_requests == 1
        entry = rig.entry_for("zorn")
        assert rig.prefilled(entry) == 1
        assert entry.cached_block_tokens > 0  # what the chat's prefill left in the cache
        assert not rig.chat.activity.is_prefilling(entry.fingerprint)

    run(tmp_path, embedder, scenario)
