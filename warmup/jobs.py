"""One priority queue and one worker: every piece of warmup work runs through it.

Jobs run one at a time, most urgent first (FIFO within a priority), so no two ever
interleave and the registry needs no lock. A long job is not a wall: it calls
``checkpoint()`` between prefills, and any job more urgent than itself that is
waiting runs right there, to its end, before the long job goes on. So a change's
re-warm waits for at most one prefill of a hot cycle or a background restore, never
for the whole of it. A job that yielded must re-check what it planned (an entry may
be retired, the knowledge base may have moved): see each job's ``checkpoint`` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

log = logging.getLogger(__name__)


class Priority(IntEnum):
    """Lower runs first."""

    CHANGE = 0  # knowledge-base changes: a stale context must not stay warm
    URGENT = 1  # start-up restore, evicted prefixes chats are asking for, seed queries
    SWEEP = 2  # expiries, query-log pruning
    ROUTINE = 3  # hot cycles, the scheduled re-check, the synthetic batch
    BACKGROUND = 4  # the rest of the start-up restore


Job = Callable[[], Awaitable[Any]]


@dataclass(order=True)
class _Queued:
    priority: int
    seq: int
    name: str = field(compare=False)
    job: Job = field(compare=False)
    done: asyncio.Future[Any] = field(compare=False)


class JobQueue:
    def __init__(self) -> None:
        self._heap: list[_Queued] = []
        self._by_name: dict[str, _Queued] = {}  # coalescable jobs waiting, by name
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._running: list[_Queued] = []  # the job running, and jobs it yielded to
        self.closed = False

    # ----- submitting ---------------------------------------------------------------

    def submit(
        self, priority: Priority, name: str, job: Job, *, coalesce: bool = False
    ) -> asyncio.Future[Any]:
        """Queue ``job``; the future resolves with its result. With ``coalesce``, a job
        of this name that is waiting (not yet running) is reused instead."""
        if self.closed:
            raise RuntimeError("the warmup job queue is closed")
        if coalesce and (waiting := self._by_name.get(name)) is not None:
            return waiting.done
        loop = asyncio.get_running_loop()
        item = _Queued(int(priority), next(self._seq), name, job, loop.create_future())
        heapq.heappush(self._heap, item)
        if coalesce:
            self._by_name[name] = item
        self._wake.set()
        if self._worker is None:
            self._worker = loop.create_task(self._work(), name="warmup-worker")
        return item.done

    async def run(self, priority: Priority, name: str, job: Job) -> Any:
        """Queue ``job`` and wait for its result. Called from inside a job, it runs at
        once instead (the worker cannot wait for itself)."""
        if self._worker is not None and asyncio.current_task() is self._worker:
            return await job()
        done = self.submit(priority, name, job)
        try:
            # A caller that gives up (a client went away) does not cancel the job.
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            done.add_done_callback(_log_failure(name))
            raise

    def spawn(self, priority: Priority, name: str, job: Job, *, coalesce: bool = True) -> None:
        """Queue ``job`` without waiting for it; a failure is logged. Once the queue is
        closed (shutting down), nothing is queued: callers on the request path never
        fail for it."""
        if self.closed:
            return
        self.submit(priority, name, job, coalesce=coalesce).add_done_callback(_log_failure(name))

    # ----- running ------------------------------------------------------------------

    async def checkpoint(self) -> bool:
        """Between two prefills of a job: run every waiting job more urgent than it.
        Returns whether any ran (then the caller re-checks what it planned)."""
        if not self._running:
            return False
        ran = False
        while self._heap and self._heap[0].priority < self._running[-1].priority:
            await self._run_one(heapq.heappop(self._heap))
            ran = True
        return ran

    async def _work(self) -> None:
        while True:
            while not self._heap:
                self._wake.clear()
                await self._wake.wait()
            await self._run_one(heapq.heappop(self._heap))

    async def _run_one(self, item: _Queued) -> None:
        if self._by_name.get(item.name) is item:
            del self._by_name[item.name]
        if item.done.cancelled():
            return
        self._running.append(item)
        try:
            result = await item.job()
        except asyncio.CancelledError:
            item.done.cancel()
            raise
        except Exception as exc:
            if not item.done.done():
                item.done.set_exception(exc)
        else:
            if not item.done.done():
                item.done.set_result(result)
        finally:
            self._running.pop()

    async def aclose(self) -> None:
        """Stop the worker (the job running is cancelled) and cancel every waiting job."""
        self.closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down
                await self._worker
        for item in self._heap:
            item.done.cancel()
        self._heap.clear()
        self._by_name.clear()


def _log_failure(name: str) -> Callable[[asyncio.Future[Any]], None]:
    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and (exc := future.exception()) is not None:
            log.error("warmup job %s failed: %r", name, exc)

    return done
