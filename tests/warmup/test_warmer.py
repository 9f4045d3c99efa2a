"""Warmup's prefills yield to chats, and under steady load take a bounded share of vLLM."""

from __future__ import annotations

import asyncio

from api.metrics import ServiceMetrics
from rag.chat.engine import ChatActivity
from rag.chat.prompt import PromptBuilder
from tests.fakes import FakeEngine
from warmup.warmer import Warmer


def test_prefills_next_to_chats_take_at_most_their_share() -> None:
    async def scenario() -> None:
        engine = FakeEngine(prefill_delay_s=0.05)
        activity = ChatActivity()
        warmer = Warmer(
            engine,
            activity,
            ServiceMetrics().warmup,
            yield_timeout_s=0.01,
            quiet_s=0.0,
            busy_share=0.01,
        )
        prefix = PromptBuilder().prefix([])
        activity.enter()  # a chat in flight: no quiet moment comes
        await warmer.warm(prefix)  # sent after the yield timeout, next to the chat
        slot = warmer.next_busy_slot
        assert slot - warmer.clock() > 3.0  # ~0.05 s x 99: the engine's other 99 %
        second = asyncio.create_task(warmer.warm(prefix))
        await asyncio.sleep(0.3)
        assert len(engine.prefills) == 1  # still waiting for quiet or for its slot
        activity.exit()  # the chat ends: a quiet moment
        await second
        assert len(engine.prefills) == 2 and warmer.clock() < slot
        assert warmer.next_busy_slot == slot  # a prefill in a quiet moment costs chats nothing

    asyncio.run(scenario())


def test_a_retouch_goes_at_once_next_to_chats_and_takes_no_busy_slot() -> None:
    async def scenario() -> None:
        engine = FakeEngine()
        activity = ChatActivity()
        warmer = Warmer(
            engine, activity, ServiceMetrics().warmup, yield_timeout_s=5.0, busy_share=0.01
        )
        prefix = PromptBuilder().prefix([])
        activity.enter()  # a chat in flight for as long as this test runs
        await asyncio.wait_for(warmer.warm(prefix, touch=True), 1.0)  # no 5 s wait
        assert len(engine.prefills) == 1 and warmer.requests_sent == 1
        assert warmer.next_busy_slot < warmer.clock()  # nothing charged to busy_share
        waiting = asyncio.create_task(warmer.warm(prefix))
        await asyncio.sleep(0.1)
        assert len(engine.prefills) == 1  # a warming prefill still waits for quiet
        waiting.cancel()

    asyncio.run(scenario())


def test_a_prefill_waits_for_a_chat_prefilling_the_same_prefix_only() -> None:
    async def scenario() -> None:
        engine = FakeEngine()
        activity = ChatActivity()
        warmer = Warmer(
            engine, activity, ServiceMetrics().warmup, yield_timeout_s=0.01, busy_share=1.0
        )
        builder = PromptBuilder()
        mine, other = builder.prefix([]), builder.prefix([], triples=[["a", "b", "c"]])
        assert mine.fingerprint != other.fingerprint
        activity.begin_prefill(mine.fingerprint)  # a chat on ``mine``, before its first token
        await asyncio.wait_for(warmer.warm(other), 1.0)  # another prefix: no wait
        assert len(engine.prefills) == 1
        waiting = asyncio.create_task(warmer.warm(mine))
        await asyncio.sleep(0.2)
        assert len(engine.prefills) == 1  # past the yield timeout, still waiting
        activity.end_prefill(mine.fingerprint)
        await asyncio.wait_for(waiting, 1.0)
        assert len(engine.prefills) == 2 and not activity.is_prefilling(mine.fingerprint)
        warmer.same_prefix_timeout_s = 0.05  # a chat whose prefill never ends
        activity.begin_prefill(mine.fingerprint)
        await asyncio.wait_for(warmer.warm(mine), 1.0)
        assert len(engine.prefills) == 3

    asyncio.run(scenario())
