"""A child process that runs the functions its parent sends over a pipe, one at a time.

The vector index's shard lives in such a process (``rag.knowledge.edge`` says why). Not
``concurrent.futures.ProcessPoolExecutor``: its call crosses two more threads of the
caller's process (a queue's feeder thread out, the pool's manager thread back), and on
two cores those threads take turns with the retrieval they serve. Measured from a
thread, as a retrieval calls it (a search's five payloads back): 514 µs a round trip
through the pool, 247 µs through a pipe read and written by the caller itself.

A call is pickled (a module-level function and its arguments), and its result or its
exception comes back pickled. Calls are granted in arrival order (``FairLock``), so a
search waits behind the calls already queued, as it did in the pool's queue, and no
longer.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from rag.knowledge.fair_lock import FairLock

T = TypeVar("T")
#: Seconds a closed worker has to leave before it is killed.
EXIT_WAIT_S = 10.0
#: Seconds a failed call waits to read a stopping worker's exit code for its message.
EXIT_READ_S = 1.0


class WorkerStopped(RuntimeError):
    """The worker's process is gone (killed, or it died); the call did not complete."""


class RemoteTraceback(Exception):
    """The worker's traceback of an exception it raised (the exception's ``__cause__``)."""

    def __str__(self) -> str:
        return str(self.args[0])


class PipeWorker:
    """A spawned process that runs ``start`` first, then each call it is sent."""

    def __init__(self, start: Callable[..., Any], *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        # Daemonic: an interpreter that exits without ``close`` ends it, as a kill would.
        self._process = context.Process(
            target=serve, args=(theirs,), name="warmrag-index", daemon=True
        )
        self._process.start()
        theirs.close()  # the child's end lives in the child alone: its exit ends our reads
        self._lock = FairLock()
        try:
            self.call(start, *args)
        except BaseException:
            self.kill()
            raise

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the worker: its result, or its exception raised here, with the
        worker's traceback as its cause. ``WorkerStopped`` where the worker is gone."""
        with self._lock:
            try:
                self._conn.send((fn, args))
                ok, value, trace = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._process.join(EXIT_READ_S)  # its exit code, where it is leaving
                raise WorkerStopped(
                    f"the worker process stopped (exit code {self._process.exitcode})"
                ) from exc
        if ok:
            return value
        raise value from RemoteTraceback(trace)

    def close(self, timeout: float = EXIT_WAIT_S) -> None:
        """Tell the worker to leave and wait for it (killed after ``timeout`` seconds)."""
        with self._lock, contextlib.suppress(OSError):  # OSError: already gone
            self._conn.send(None)
        self._process.join(timeout)
        self.kill()

    def kill(self) -> None:
        """End the worker now, if it still runs, and release the pipe (once no call reads
        it: a call waiting on a killed worker reads the end of the pipe at once)."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        with self._lock:
            self._conn.close()


def serve(conn: Connection) -> None:
    """The worker's loop: run each call received until ``None`` or the parent's end
    closes. An exception goes back to the caller; one that cannot be pickled goes back
    as a ``RuntimeError`` with its text. Ctrl-C at a terminal reaches the whole process
    group: the worker leaves it to the parent, whose stop closes the worker cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        fn, args = request
        try:
            reply = (True, fn(*args), "")
        except Exception as exc:  # every failure goes back to the caller
            reply = (False, exc, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result or exception
            conn.send((False, RuntimeError(f"{type(exc).__name__}: {exc}"), reply[2]))
