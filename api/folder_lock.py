"""One warmrag process per data folder: the service holds its folder for its whole life,
the CLI's embedded mode while it writes.

Why: every store in the folder assumes a single owner (the knowledge base's state file,
the graph and its snapshot, the warm registry, the vLLM child's folder). The embedded
Qdrant shard's own lock covered most of it, but it is released when the knowledge base
closes, before the graph saves its snapshot; a second service started in that window
found no snapshot, removed the save's temporary files as a crash's leftovers, and the
first service's save failed (nothing was lost, but the next start rebuilt the graph from
its rows: 150 s at 1,000,000 chunks). With a Qdrant server nothing guarded the folder.

The lock is ``filelock``'s (``flock`` where the file system has it, a marker file
where it does not). ``flock`` is released by the kernel when its holder dies, so a crash
never leaves a stale lock, and its descriptor is not inherited by child processes (vLLM,
the index's worker), so an orphaned child does not hold the folder either. Beside it, a
note says who holds it (pid, host, what, since when), for the error a second process
shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout

#: The lock file in the data folder, and the note beside it naming its holder.
LOCK_NAME = "warmrag.lock"
HOLDER_NAME = "warmrag.lock.holder"


class DataFolderInUseError(RuntimeError):
    """Another process (or another part of this one) holds the data folder."""

    def __init__(self, folder: Path, holder: str | None) -> None:
        who = f" ({holder})" if holder else ""
        super().__init__(
            f"data folder {folder} is in use by another warmrag process{who}: one process "
            "at a time opens a data folder; stop it first (a stopping service lets go "
            "once its stores are saved), or give this one its own WARMRAG_DATA_DIR"
        )
        self.folder = folder
        self.holder = holder


class DataFolderLock:
    """Holds ``folder`` for this process: ``acquire`` at once or ``DataFolderInUseError``;
    ``release`` lets go (also done by the kernel if the process dies). ``role`` says what
    holds it ("the service", "an embedded ingest") in a contender's error."""

    def __init__(self, folder: Path, role: str) -> None:
        self.folder = folder
        self.role = role
        # Not thread-local: taken in a worker thread, let go from the event loop's.
        self._lock = FileLock(folder / LOCK_NAME, timeout=0, thread_local=False)

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> None:
        """Take the folder (creating it if needed), or raise ``DataFolderInUseError``
        naming the holder; an ``OSError`` where the folder cannot be written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            raise DataFolderInUseError(self.folder, self._holder()) from None
        try:
            self._write_holder()
        except OSError:
            self._lock.release()
            raise

    def release(self) -> None:
        if not self._lock.is_locked:
            return
        with contextlib.suppress(OSError):  # a note left behind names a past holder
            (self.folder / HOLDER_NAME).unlink(missing_ok=True)
        self._lock.release()

    def _write_holder(self) -> None:
        """The note, written whole or not at all (a contender may read it any time)."""
        note = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "role": self.role,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        staged = self.folder / f".{HOLDER_NAME}.{os.getpid()}"
        staged.write_text(json.dumps(note))
        os.replace(staged, self.folder / HOLDER_NAME)

    def _holder(self) -> str | None:
        """Who holds the folder, from its note; None where there is none to read."""
        try:
            note = json.loads((self.folder / HOLDER_NAME).read_text())
            return f"{note['role']}, pid {note['pid']} on {note['host']}, since {note['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return None
