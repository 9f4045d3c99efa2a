"""One process per data folder (``api.folder_lock``): a second opener is refused with its
holder named, a stopping service holds the folder until its stores are saved, and a
holder that dies leaves no stale lock."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from api.config import Settings
from api.folder_lock import HOLDER_NAME, DataFolderInUseError, DataFolderLock
from api.main import create_app
from api.runtime import Runtime
from rag.knowledge.embedding import Embedder
from rag.knowledge.graph_sync import GraphSync
from rag.knowledge.models import DocumentIn
from tests.conftest import Service
from tests.fakes import FakeEngine


def test_a_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    first = DataFolderLock(folder, "the service")
    first.acquire()
    assert first.held and (folder / HOLDER_NAME).is_file()
    second = DataFolderLock(folder, "an embedded ingest or delete")
    with pytest.raises(DataFolderInUseError) as refused:
        second.acquire()
    assert refused.value.holder is not None
    assert f"the service, pid {os.getpid()}" in str(refused.value)
    assert str(folder) in str(refused.value) and "WARMRAG_DATA_DIR" in str(refused.value)
    assert not second.held
    first.release()
    assert not (folder / HOLDER_NAME).exists()
    second.acquire()  # free once let go
    second.release()
    second.release()  # twice is harmless


HOLD = """
import sys, time
from pathlib import Path
from api.folder_lock import DataFolderLock
lock = DataFolderLock(Path(sys.argv[1]), "the service")
lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_holder_killed_leaves_no_stale_lock(tmp_path: Path) -> None:
    """Fault injected: the holding process is killed with SIGKILL (no clean-up runs)."""
    folder = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        with pytest.raises(DataFolderInUseError, match=f"pid {child.pid} on "):
            DataFolderLock(folder, "the service").acquire()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert (folder / HOLDER_NAME).is_file()  # its note stays behind, naming nobody live
    lock = DataFolderLock(folder, "the service")
    lock.acquire()  # the kernel let go of the dead holder's lock
    assert f"pid {os.getpid()}" in (folder / HOLDER_NAME).read_text().replace('"pid": ', "pid ")
    lock.release()


def test_a_second_service_on_the_folder_is_refused_and_touches_nothing(
    tmp_path: Path,
    embedder: Embedder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second service is refused while the first runs, and while the first is still
    stopping: its index closed, its graph's snapshot about to be saved (before the lock,
    a start in that window removed the save's files). Once the first has stopped, the
    second opens and finds everything, the graph read back from the snapshot."""
    settings = Settings(data_dir=tmp_path / "data", seed_sample_kb=False)
    refusals: list[str] = []
    close = GraphSync.close

    def close_with_a_contender(self: GraphSync) -> None:
        contender = Runtime(settings, embedder=embedder, llm=FakeEngine())
        with ThreadPoolExecutor(1) as pool, pytest.raises(DataFolderInUseError) as refused:
            pool.submit(asyncio.run, contender.open()).result()
        refusals.append(str(refused.value))
        close(self)

    async def run() -> None:
        first = Runtime(settings, embedder=embedder, llm=FakeEngine())
        await first.open()
        await first.knowledge.ingest([DocumentIn(id="zorn", text=ZORN)])
        second = Runtime(settings, embedder=embedder, llm=FakeEngine())
        with pytest.raises(DataFolderInUseError, match="the service, pid"):
            await second.open()
        assert first.kb.document_ids() == ["zorn"]  # the refused open touched nothing
        with monkeypatch.context() as patch:
            patch.setattr(GraphSync, "close", close_with_a_contender)
            await first.stop()
        caplog.clear()
        await second.open()
        try:
            assert second.kb.document_ids() == ["zorn"]
        finally:
            await second.stop()

    caplog.set_level(logging.INFO, logger="kg.store")
    asyncio.run(run())
    assert len(refusals) == 1 and "the service, pid" in refusals[0]
    assert "read back from the snapshot saved at the last stop" in caplog.text


ZORN = "The river Zorn flows through Kellerby. Kellerby is a town in Alsace."


def test_the_app_refuses_to_start_on_a_held_folder_with_one_line_saying_why(
    fake_service: Service, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(fake_service.settings, embedder=embedder, llm=FakeEngine())

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pytest.fail("the app started on a folder another service holds")

    with pytest.raises(DataFolderInUseError):
        asyncio.run(start())
    said = [r.getMessage() for r in caplog.records if r.name == "api.main"]
    assert said and said[-1].startswith(f"data folder {fake_service.settings.data_dir} is in use")
    assert fake_service.chat("Where does the Zorn flow?")["answer"]  # the first one serves on
