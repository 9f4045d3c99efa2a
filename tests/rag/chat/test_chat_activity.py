"""Background prefills wait for a quiet moment between chats, but not forever."""

from __future__ import annotations

import asyncio
import time

from rag.chat.engine import ChatActivity


def test_idle_from_the_start() -> None:
    assert asyncio.run(ChatActivity().wait_idle(1.0, quiet_s=0.2)) is True


def test_waits_for_the_quiet_period_after_a_chat() -> None:
    async def scenario() -> tuple[bool, float]:
        activity = ChatActivity()
        activity.enter()
        asyncio.get_running_loop().call_later(0.1, activity.exit)
        started = time.monotonic()
        quiet = await activity.wait_idle(2.0, quiet_s=0.2)
        return quiet, time.monotonic() - started

    quiet, waited = asyncio.run(scenario())
    assert quiet is True
    assert 0.28 <= waited < 1.0  # the chat's 0.1 s, then 0.2 s of quiet


def test_back_to_back_chats_time_out_instead_of_starving() -> None:
    async def scenario() -> tuple[bool, float]:
        activity = ChatActivity()

        async def client() -> None:
            while True:  # the next chat follows the last within 10 ms
                activity.enter()
                await asyncio.sleep(0.05)
                activity.exit()
                await asyncio.sleep(0.01)

        task = asyncio.create_task(client())
        started = time.monotonic()
        quiet = await activity.wait_idle(0.5, quiet_s=0.2)
        task.cancel()
        return quiet, time.monotonic() - started

    quiet, waited = asyncio.run(scenario())
    assert quiet is False
    assert 0.45 <= waited < 0.8
