"""Crash-safe file replacement, for every layer that persists a file (the graph, the
knowledge base's state, the shared-writer id): a reader sees the old file or the new one,
never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

TEMP_SUFFIX = ".tmp"


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` through ``write`` into a temp file in the same folder, fsync, rename.

    The temp file must live in the same folder (same file system) for ``os.replace`` to be
    atomic; the folder is fsynced too so that the rename itself survives a power cut.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


def remove_stale_temps(folder: Path, name: str) -> None:
    """Delete temp files a crash left behind for ``name`` (they are never read)."""
    for stale in folder.glob(f".{name}.*{TEMP_SUFFIX}"):
        with contextlib.suppress(OSError):
            stale.unlink()


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def forget_cached_pages(path: Path) -> None:
    """Ask the kernel to drop ``path``'s clean pages from the page cache (``fadvise``
    ``DONTNEED``; pages not yet written are written, not lost): for a large file read
    once, whose pages would otherwise push out those of files read again and again. A
    hint only: nothing where the platform has no ``posix_fadvise`` or the file is gone."""
    if not hasattr(os, "posix_fadvise"):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
