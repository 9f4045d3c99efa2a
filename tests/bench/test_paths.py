"""A benchmark's temporary folder goes away when the run is stopped with SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.paths import REPO, STOPPED_STATUS, bench_dir, stop_raises

# A run that makes its folder, says where, then waits to be stopped.
RUN = """
import sys, time
from bench.paths import bench_dir
with bench_dir(prefix="bench-stopped-") as folder:
    (folder / "part").write_bytes(b"x" * 1024)
    print(folder, flush=True)
    time.sleep(60)
"""


def test_a_run_stopped_with_sigterm_removes_its_folder() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        folder = Path(proc.stdout.readline().strip())
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
