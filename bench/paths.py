"""Where the benchmarks keep their files: the repository, and temporary folders in its
ignored data folder (never /tmp, which is small here)."""

from __future__ import annotations

import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parent.parent

#: The exit status of a run stopped by SIGTERM, and of one stopped by Ctrl-C (SIGINT), as a
#: shell reports a process such a signal ended.
STOPPED_STATUS = 128 + signal.SIGTERM
INTERRUPTED_STATUS = 128 + signal.SIGINT


class Stopped(SystemExit):
    """A run stopped with SIGTERM (``stop_raises``); exits with ``STOPPED_STATUS``."""


@contextmanager
def bench_dir(prefix: str = "bench-") -> Iterator[Path]:
    """A temporary folder inside data/, removed afterwards, also when the run is stopped
    with SIGTERM (``stop_raises``): a 1,000,000-chunk folder is gigabytes, and a run a
    job runner stops at its time limit must not leave one behind."""
    (REPO / "data").mkdir(exist_ok=True)
    with (
        stop_raises(),
        tempfile.TemporaryDirectory(dir=REPO / "data", prefix=prefix) as folder,
    ):
        yield Path(folder)


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
