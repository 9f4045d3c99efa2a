"""A benchmark's temporary folder goes away when the run is stopped with SIGTERM, and the
next benchmark removes one a run killed outright left."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.paths import (
    REPO,
    RUN_LOCK,
    STOPPED_STATUS,
    bench_dir,
    stop_raises,
    sweep_stopped_runs,
)

# A run that makes its folder, says where, then waits to be stopped.
RUN = """
import sys, time
from bench.paths import bench_dir
with bench_dir(prefix="bench-stopped-") as folder:
    (folder / "part").write_bytes(b"x" * 1024)
    print(folder, flush=True)
    time.sleep(60)
"""


def start_run() -> tuple[subprocess.Popen[str], Path]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_run_stopped_with_sigterm_removes_its_folder() -> None:
    proc, folder = start_run()
    try:
        assert (folder / "part").is_file()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == STOPPED_STATUS
    finally:
        proc.kill()
        proc.wait()
    assert not folder.exists()


def test_the_handler_is_put_back_and_someone_elses_kept() -> None:
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with bench_dir() as folder:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert folder.is_dir()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def theirs(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, theirs)
    try:
        with stop_raises():
            assert signal.getsignal(signal.SIGTERM) is theirs
        assert signal.getsignal(signal.SIGTERM) is theirs
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_run_killed_outright_leaves_its_folder_to_the_next_sweep() -> None:
    killed, gone = start_run()
    running, kept = start_run()
    try:
        killed.kill()  # SIGKILL: no cleanup runs
        killed.wait(timeout=30)
        assert (gone / "part").is_file()
        assert sweep_stopped_runs(gone.parent) == []  # its lock is too young to judge
        for folder in (gone, kept):
            old = time.time() - 120
            os.utime(folder / RUN_LOCK, (old, old))
        removed = sweep_stopped_runs(gone.parent)
        assert (gone, 1024) in removed and not gone.exists()
        assert kept not in [f for f, _ in removed] and (kept / "part").is_file()
    finally:
        for proc in (killed, running):
            proc.kill()
            proc.wait()
        for folder in (gone, kept):
            shutil.rmtree(folder, ignore_errors=True)


def test_a_sweep_leaves_folders_that_are_not_a_runs(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "part").write_bytes(b"x")
    assert sweep_stopped_runs(tmp_path, after_s=0) == []
    assert (tmp_path / "kept" / "part").is_file()
