"""Where the benchmarks keep their files: the repository, and temporary folders in its
ignored data folder (never /tmp, which is small here)."""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from filelock import FileLock, Timeout

REPO = Path(__file__).resolve().parent.parent

#: The exit status of a run stopped by SIGTERM, and of one stopped by Ctrl-C (SIGINT), as a
#: shell reports a process such a signal ended.
STOPPED_STATUS = 128 + signal.SIGTERM
INTERRUPTED_STATUS = 128 + signal.SIGINT


class Stopped(SystemExit):
    """A run stopped with SIGTERM (``stop_raises``); exits with ``STOPPED_STATUS``."""


#: In each benchmark's folder, held (``flock``) for the run's life: the kernel lets go
#: when the run dies, however it dies.
RUN_LOCK = ".bench-run.lock"
#: A folder whose lock is younger than this is left alone: its run may be about to hold it.
SWEEP_AFTER_S = 60.0


@contextmanager
def bench_dir(prefix: str = "bench-") -> Iterator[Path]:
    """A temporary folder inside data/, removed afterwards, also when the run is stopped
    with SIGTERM (``stop_raises``): a 1,000,000-chunk folder is gigabytes, and a run a
    job runner stops at its time limit must not leave one behind. A run killed outright
    (SIGKILL, the kernel's OOM killer) runs no cleanup: the next benchmark removes its
    folder (``sweep_stopped_runs``)."""
    data = REPO / "data"
    data.mkdir(exist_ok=True)
    for gone, size in sweep_stopped_runs(data):
        print(
            f"removed {gone.name}, a stopped run's folder ({size / 2**30:.1f} GiB)", file=sys.stderr
        )
    with (
        stop_raises(),
        tempfile.TemporaryDirectory(dir=data, prefix=prefix) as folder,
        FileLock(Path(folder) / RUN_LOCK, timeout=0, thread_local=False),
    ):
        yield Path(folder)


def sweep_stopped_runs(parent: Path, after_s: float = SWEEP_AFTER_S) -> list[tuple[Path, int]]:
    """Remove the folders in ``parent`` of benchmark runs that ended without removing
    them: those with a ``RUN_LOCK`` older than ``after_s`` that nobody holds. A folder
    without one (not a benchmark's, or one from before the lock) is left alone. Returns
    each folder removed, with the bytes it held."""
    removed: list[tuple[Path, int]] = []
    for lock_path in sorted(parent.glob(f"*/{RUN_LOCK}")):
        folder = lock_path.parent
        try:
            if time.time() - lock_path.stat().st_mtime < after_s:
                continue
            with FileLock(lock_path, timeout=0, thread_local=False):
                size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
                shutil.rmtree(folder)
        except Timeout:
            continue  # its run goes on
        except FileNotFoundError:
            continue  # another run's sweep removed it
        except OSError as exc:  # one that cannot be removed stays, named
            print(f"could not remove {folder.name}, a stopped run's folder: {exc}", file=sys.stderr)
            continue
        removed.append((folder, size))
    return removed


@contextmanager
def stop_raises() -> Iterator[None]:
    """SIGTERM raises ``Stopped`` (a ``SystemExit``) while inside, so every ``with`` and ``finally``
    around the raise runs: temporary folders are removed and vLLM children stopped.
    Python's default on SIGTERM ends the process at once, which left a stopped run's
    folder in data/. Only the main thread can set a handler, and a handler someone else
    set is theirs: in either case this does nothing. The previous handler comes back on
    the way out."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(STOPPED_STATUS)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
