"""Residency from KV events: the index alone, then the warmup layer against
``FakeEngine`` publishing events as vLLM does (stored and evicted blocks, a reset,
lost batches), with real retrieval and the real registry."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from rag.knowledge.embedding import Embedder
from rag.llm.block_hashes import VLLMBlockHasher
from rag.llm.placement import Located
from tests.fakes import FakeEngine
from tests.warmup.rig import QUESTIONS, Rig
from tests.warmup.test_service import run
from warmup.jobs import Priority
from warmup.keeper import RetouchBudget
from warmup.reports import CycleKind
from warmup.residency import EntryResidency, Residence, ResidencyIndex
from warmup.tracker import ResidencyTracker

# ----- the index --------------------------------------------------------------------


def test_an_entry_is_full_partial_none_or_unknown_as_the_events_say() -> None:
    evicted: list[set[str]] = []
    index = ResidencyIndex(block_size=4, capacity_blocks=10, on_evicted=evicted.append)
    index.track("a", [1, 2, 3])
    assert index.state("a") == EntryResidency(Residence.FULL, 3, 3, 0)
    index.removed([3])
    assert evicted == [{"a"}]
    assert index.state("a").state is Residence.PARTIAL  # type: ignore[union-attr]
    assert index.state("a").resident_blocks == 2  # type: ignore[union-attr]
    index.removed([1])  # the first block gone: nothing of it can be reused
    assert index.state("a").state is Residence.NONE  # type: ignore[union-attr]
    index.stored([1, 3])
    assert index.state("a").state is Residence.FULL  # type: ignore[union-attr]
    index.unknown("lost batches")
    assert index.state("a").state is Residence.UNKNOWN  # type: ignore[union-attr]
    index.stored([1, 2])  # vLLM shows some again; the third stays unknown
    assert index.state("a").state is Residence.UNKNOWN  # type: ignore[union-attr]
    index.used("a")  # a request just reused it all
    assert index.state("a").state is Residence.FULL  # type: ignore[union-attr]
    index.cleared()
    assert index.state("a").state is Residence.NONE  # type: ignore[union-attr]
    index.untrack("a")
    assert index.state("a") is None and index.tracked() == []


def test_a_miss_is_predicted_from_evictions_since_the_entry_was_last_used() -> None:
    index = ResidencyIndex(block_size=4, capacity_blocks=10)
    index.track("a", [1, 2])
    assert index.lost_since_use("a") is False
    index.removed([2])
    index.stored([2])  # the chat that misses recomputes it while it runs
    assert index.lost_since_use("a") is True  # still the miss it was
    index.used("a")
    assert index.lost_since_use("a") is False
    index.unknown()
    assert index.lost_since_use("a") is None  # unknown: no prediction
    assert index.lost_since_use("b") is None


def test_the_index_predicts_cached_tokens_by_leading_resident_blocks() -> None:
    index = ResidencyIndex(block_size=4, capacity_blocks=10)
    index.stored([1, 2, 4])
    assert index.predict_cached_tokens([1, 2, 3, 4], prompt_tokens=18) == 8  # stops at 3
    assert index.predict_cached_tokens([1, 2], prompt_tokens=8) == 4  # last token computed
    assert index.predict_cached_tokens([5], prompt_tokens=9) == 0


def test_age_counts_the_blocks_stored_since_an_entry_was_used() -> None:
    index = ResidencyIndex(block_size=4, capacity_blocks=10)
    index.track("a", [1, 2])
    index.stored([10, 11, 12, 13])
    assert index.state("a").age_blocks == 4  # type: ignore[union-attr]
    assert index.pressure("a") == 0.4
    index.used("a")
    assert index.pressure("a") == 0.0


def test_entries_sharing_blocks_are_all_told_of_an_eviction() -> None:
    evicted: list[set[str]] = []
    index = ResidencyIndex(block_size=4, capacity_blocks=10, on_evicted=evicted.append)
    index.track("a", [1, 2])
    index.track("b", [1, 3])  # the same instruction block first
    index.removed([1])
    assert evicted == [{"a", "b"}]
    assert index.keep_only(["a"]) == 1 and index.tracked() == ["a"]


def test_the_tracker_tells_the_router_where_an_entry_is_filed() -> None:
    async def tokenize(_: object) -> list[int] | None:
        return None

    tracker = ResidencyTracker(tokenize, lambda _: VLLMBlockHasher(4))
    a, b = ResidencyIndex(4, 10), ResidencyIndex(4, 10)
    tracker.attach("a:8000", a)
    tracker.attach("b:8000", b)
    b.track("x", [1, 2])
    b.stored([1, 2])
    assert tracker.locate("x") == Located("b:8000", resident=True)
    b.removed([2])  # the leading block is still there: partly reusable
    assert tracker.locate("x") == Located("b:8000", resident=True)
    b.removed([1])
    assert tracker.locate("x") == Located("b:8000", resident=False)
    assert tracker.locate("y") is None


def test_the_retouch_budget_is_a_share_of_the_time_since_start() -> None:
    now = [100.0]
    budget = RetouchBudget(0.1, clock=lambda: now[0])
    assert budget.allows()
    budget.spend(1.0)
    assert not budget.allows()  # 1 s spent, 0 s elapsed
    now[0] += 10.0
    assert budget.allows()  # 1 s of 10 s
    assert not RetouchBudget(0.0, clock=lambda: now[0]).allows()  # 0 turns it off


# ----- the warmup layer with events ---------------------------------------------------

#: Room for about three prompts, all of it warmable: other chats evict warm entries.
SMALL = {"budget_share": 1.0, "kv_usage_threshold": 1.0}


def others(rig: Rig) -> list[str]:
    return [QUESTIONS[n] for n in ("mars", "rye", "piano", "tea", "owl")]


def rewarms(rig: Rig, reason: str) -> float:
    value = rig.metrics.registry.get_sample_value("warmrag_rewarm_total", {"reason": reason})
    return float(value or 0.0)


def test_an_eviction_event_rewarms_a_hot_entry_before_its_next_chat(
    tmp_path: Path, embedder: Embedder
) -> None:
    """With events off, the same traffic leaves the next chat a KV miss
    (test_service.py::test_an_evicted_prefix_is_a_kv_miss_and_is_rewarmed)."""

    async def scenario(rig: Rig) -> None:
        await rig.service.add_seed_queries([QUESTIONS["zorn"]])
        entry = rig.entry_for("zorn")
        assert rig.service.view().entries[0].kv is Residence.FULL
        for question in others(rig):
            await rig.ask(question)
            await asyncio.sleep(0)  # the eviction callback runs on the loop
        await rig.service.sweep()  # queued behind the urgent re-warms: they have run
        assert rewarms(rig, "kv_evicted") >= 1
        assert rig.engine.is_cached(entry.messages)
        assert (await rig.ask(QUESTIONS["zorn"])).cache.warm_hit is True
        assert rig.counter("warmrag_kv_cache_miss_total") == 0
        residency = rig.service.view().residency
        assert residency is not None and residency.source == "kv_events"
        assert residency.removed_blocks > 0 and residency.mispredicted == 0

    run(tmp_path, embedder, scenario, engine=FakeEngine(num_blocks=100), events=True, **SMALL)


def test_lost_events_make_residency_unknown_until_vllm_shows_it_again(
    tmp_path: Path, embedder: Embedder
) -> None:
    async def scenario(rig: Rig) -> None:
        await rig.service.add_seed_queries([QUESTIONS["zorn"]])
        rig.engine.lose_events = 1
        await rig.ask(QUESTIONS["mars"])  # its batch is lost: a gap in the sequence
        await rig.ask(QUESTIONS["rye"])  # the next batch shows the gap
        view = rig.service.view()
        assert view.residency is not None and view.residency.unknown_periods == 1
        zorn = next(e for e in view.entries if e.queries == [rig.entry_for("zorn").queries[0]])
        assert zorn.kv is Residence.UNKNOWN  # not trusted as resident
        result = await rig.ask(QUESTIONS["zorn"])  # vLLM still had it
        assert result.cache.warm_hit is True
        assert rig.service.keeper is not None and rig.service.keeper.mispredicted == 0
        assert rig.service.view().entries[0].kv is Residence.FULL  # seen again

    run(tmp_path, embedder, scenario, events=True)


def test_a_hot_entry_near_the_lru_tail_is_retouched_and_never_evicted(
    tmp_path: Path, embedder: Embedder
) -> None:
    async def scenario(rig: Rig) -> None:
        await rig.service.add_seed_queries([QUESTIONS["zorn"]])
        entry = rig.entry_for("zorn")
        keeper = rig.service.keeper
        assert keeper is not None
        for question in others(rig):
            await rig.ask(question)
            # What the keeper's watch does every second.
            if keeper.due():
                await rig.service.cycles.run(Priority.URGENT, CycleKind.RETOUCH, keeper.retouch)
        assert keeper.retouches >= 1 and rewarms(rig, "retouch") == keeper.retouches
        # Sent with the generation prompt after it: every block of the prefix is reused
        # (vLLM computes a prompt's last token, so the prefix alone would leave its last
        # block unrefreshed).
        assert rig.engine.touches and rig.engine.touches[0][-1] == "<assistant>"
        assert keeper.evicted_rewarms == 0  # never fell off the LRU tail
        assert rig.engine.is_cached(entry.messages)
        assert (await rig.ask(QUESTIONS["zorn"])).cache.warm_hit is True

    run(
        tmp_path,
        embedder,
        scenario,
        engine=FakeEngine(num_blocks=100),
        events=True,
        retouch_share=1.0,
        retouch_at=0.3,
        **SMALL,
    )


def test_a_cold_entry_is_not_rewarmed_on_eviction(tmp_path: Path, embedder: Embedder) -> None:
    async def scenario(rig: Rig) -> None:
        await rig.ask(QUESTIONS["zorn"])
        rig.now[0] += 30 * 86400.0  # a month later its one sighting has decayed away
        keeper = rig.service.keeper
        assert keeper is not None
        assert keeper.evicted({"unknown-fingerprint"}) == 0
        assert keeper.due() == []

    run(tmp_path, embedder, scenario, events=True)


def test_a_server_that_publishes_nothing_is_reported_once(
    tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(rig: Rig) -> None:
        rig.engine.events = None  # the server was started without --kv-events-config
        await rig.service.add_seed_queries([QUESTIONS[n] for n in ("zorn", "mars", "rye")])
        keeper = rig.service.keeper
        assert keeper is not None
        with caplog.at_level(logging.WARNING, logger="warmup.keeper"):
            assert keeper.events_missing() and keeper.events_missing()
        assert [r.message.startswith("no KV events") for r in caplog.records] == [True]

    run(tmp_path, embedder, scenario, events=True)
