"""Write-behind of the registry to SQLite: in order, off the event loop, self-healing.

The registry changes in memory first and queues each change here as one write (a
function of the store). One task drains the queue in batches, each batch one
transaction in a worker thread, so a locked file (waited on up to the store's busy
timeout), a full disk or an I/O error never holds up a chat or a job.

When a batch fails, the store has rolled it back and reconnects on its next use. The
writes queued so far are dropped — the registry in memory already holds their result —
and the whole registry is written again in one transaction once the store takes
writes again (retried with backoff). A crash can lose the last writes, never leave
the store half-written: at worst it holds the state of a moment earlier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import anyio

from warmup.store import Snapshot, WarmupStore

log = logging.getLogger(__name__)

Write = Callable[[WarmupStore], None]


class Journal:
    def __init__(
        self,
        store: WarmupStore,
        snapshot: Callable[[], Snapshot],
        *,
        retry_s: float = 0.5,
        max_retry_s: float = 30.0,
    ) -> None:
        """``snapshot`` returns everything the store should hold (the registry's state)."""
        self.store = store
        self.snapshot = snapshot
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.failures = 0  # batches or rewrites that failed
        self._writes: list[Write] = []
        self._rewrite = False  # the store missed writes: write everything again
        self._busy = False
        self._closed = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def backlog(self) -> int:
        """Writes not yet in SQLite (and 1 while the store must be rewritten)."""
        return len(self._writes) + int(self._rewrite) + int(self._busy)

    def write(self, write: Write) -> None:
        """Queue one write; it reaches SQLite after every write queued before it."""
        if self._closed:
            return  # shutting down: the store is closing
        self._writes.append(write)
        self._wake.set()
        if self._task is None:
            with contextlib.suppress(RuntimeError):  # no event loop yet: started later
                self._task = asyncio.get_running_loop().create_task(
                    self._run(), name="warmup-journal"
                )

    async def _run(self) -> None:
        delay = self.retry_s
        while True:
            if not self._writes and not self._rewrite:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._busy = True
            try:
                if self._rewrite:
                    snapshot = self.snapshot()  # taken on the loop: consistent
                    self._writes.clear()  # the snapshot holds their result
                    await anyio.to_thread.run_sync(self.store.replace_all, snapshot)
                    self._rewrite = False
                    log.info("warmup store writable again: registry rewritten")
                else:
                    batch, self._writes = self._writes, []
                    await anyio.to_thread.run_sync(self._apply, batch)
                delay = self.retry_s
            except Exception as exc:
                self.failures += 1
                self._rewrite = True
                self._writes.clear()
                log.warning("warmup store write failed (%r); retry in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_retry_s)
            finally:
                self._busy = False

    def _apply(self, batch: list[Write]) -> None:
        with self.store.transaction():
            for write in batch:
                write(self.store)

    async def flush(self, timeout_s: float) -> bool:
        """Wait until every queued write is in SQLite (False: not within ``timeout_s``)."""
        if self._writes and self._task is None:
            self.write(lambda store: None)  # starts the task in this loop
        with anyio.move_on_after(timeout_s):
            while self.backlog:
                await asyncio.sleep(0.01)
        return not self.backlog

    async def aclose(self, timeout_s: float = 5.0) -> None:
        """Write what is queued (waiting at most ``timeout_s``), then stop."""
        if not await self.flush(timeout_s):
            log.warning("warmup store: %d writes not persisted at shutdown", self.backlog)
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
