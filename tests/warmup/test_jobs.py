"""The job queue: most urgent first, long jobs yield at checkpoints, one worker."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from warmup.jobs import JobQueue, Priority


async def nothing() -> None:
    pass


def test_most_urgent_first_and_fifo_within_a_priority() -> None:
    async def scenario() -> list[str]:
        queue, ran = JobQueue(), []

        def job(name: str) -> Callable[[], Awaitable[str]]:
            async def body() -> str:
                ran.append(name)
                return name

            return body

        futures = [
            queue.submit(Priority.ROUTINE, "a", job("routine 1")),
            queue.submit(Priority.BACKGROUND, "b", job("background")),
            queue.submit(Priority.ROUTINE, "c", job("routine 2")),
            queue.submit(Priority.CHANGE, "d", job("change")),
        ]
        assert await asyncio.gather(*futures) == ["routine 1", "background", "routine 2", "change"]
        await queue.aclose()
        return ran

    assert asyncio.run(scenario()) == ["change", "routine 1", "routine 2", "background"]


def test_a_long_job_yields_to_an_urgent_one_at_its_checkpoints() -> None:
    async def scenario() -> list[str]:
        queue, ran = JobQueue(), []
        step = asyncio.Event()

        async def long() -> None:
            for i in range(3):
                await queue.checkpoint()
                ran.append(f"long {i}")
                if i == 0:
                    step.set()
                await asyncio.sleep(0.01)

        async def urgent() -> None:
            ran.append("urgent")

        async def later() -> None:
            ran.append("routine")

        done = queue.submit(Priority.ROUTINE, "long", long)
        await step.wait()
        queue.submit(Priority.ROUTINE, "routine", later)  # not more urgent: waits
        await queue.run(Priority.CHANGE, "urgent", urgent)
        await done
        await queue.run(Priority.BACKGROUND, "last", later)
        await queue.aclose()
        return ran

    assert asyncio.run(scenario()) == ["long 0", "urgent", "long 1", "long 2", "routine", "routine"]


def test_coalesced_jobs_run_once_and_a_caller_giving_up_does_not_cancel() -> None:
    async def scenario() -> tuple[int, bool]:
        queue, runs = JobQueue(), [0]
        gate = asyncio.Event()

        async def blocker() -> None:
            await gate.wait()

        async def counted() -> int:
            runs[0] += 1
            return runs[0]

        queue.submit(Priority.URGENT, "blocker", blocker)
        first = queue.submit(Priority.ROUTINE, "n", counted, coalesce=True)
        second = queue.submit(Priority.ROUTINE, "n", counted, coalesce=True)
        waiter = asyncio.create_task(queue.run(Priority.ROUTINE, "kept", counted))
        await asyncio.sleep(0.01)
        waiter.cancel()  # the caller goes away; its job still runs
        gate.set()
        assert await first == await second == 1
        await queue.run(Priority.BACKGROUND, "after", nothing)  # everything before it ran
        await queue.aclose()
        return runs[0], waiter.cancelled()

    assert asyncio.run(scenario()) == (2, True)
