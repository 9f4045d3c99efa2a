"""The child process that runs the vector index's calls (``rag.knowledge.pipe_worker``).

The calls are standard-library functions, so the spawned child imports nothing of the
tests'."""

from __future__ import annotations

import math
import multiprocessing
import operator
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rag.knowledge.pipe_worker import PipeWorker, RemoteTraceback, WorkerStopped


@pytest.fixture
def worker() -> Iterator[PipeWorker]:
    started = PipeWorker(os.getpid)
    yield started
    started.close()


def test_a_call_runs_in_the_child_and_returns_its_result(worker: PipeWorker) -> None:
    assert worker.call(os.getpid) == worker.pid != os.getpid()
    assert worker.call(operator.add, [1], [2]) == [1, 2]


def test_an_exception_comes_back_with_the_childs_traceback(worker: PipeWorker) -> None:
    with pytest.raises(ZeroDivisionError) as raised:
        worker.call(operator.truediv, 1, 0)
    cause = raised.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "ZeroDivisionError" in str(cause) and "Traceback" in str(cause)
    assert worker.call(math.sqrt, 4.0) == 2.0  # the worker goes on serving


def test_a_result_that_cannot_be_pickled_fails_that_call_alone(worker: PipeWorker) -> None:
    with pytest.raises(RuntimeError, match="pickle"):
        worker.call(threading.Lock)
    assert worker.call(math.sqrt, 9.0) == 3.0


def test_calls_from_many_threads_each_get_their_own_answer(worker: PipeWorker) -> None:
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: worker.call(operator.mul, i, 3), range(200)))
    assert answers == [i * 3 for i in range(200)]


def test_a_killed_child_fails_the_call_with_worker_stopped(worker: PipeWorker) -> None:
    """Fault injected: the child is killed (SIGKILL) between two calls."""
    pid = worker.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerStopped, match=r"stopped \(exit code -9\)"):
        worker.call(os.getpid)
    with pytest.raises(WorkerStopped):  # and every call after it, until replaced
        worker.call(os.getpid)


def test_ctrl_c_is_left_to_the_parent(worker: PipeWorker) -> None:
    """Fault injected: SIGINT, as a terminal's Ctrl-C sends it to the whole process
    group; the parent's stop closes the child, which must still be there to flush."""
    pid = worker.call(os.getpid)
    os.kill(pid, signal.SIGINT)
    assert worker.call(operator.add, 2, 2) == 4


def test_close_lets_the_child_leave_on_its_own() -> None:
    worker = PipeWorker(os.getpid)
    process = worker._process
    worker.close()
    assert process.exitcode == 0  # it left at the request, not killed (-9)
    with pytest.raises(WorkerStopped):
        worker.call(os.getpid)


def test_a_start_that_fails_raises_and_leaves_no_process(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        PipeWorker(os.stat, str(tmp_path / "missing"))
    assert not [p for p in multiprocessing.active_children() if p.name == "warmrag-index"]
