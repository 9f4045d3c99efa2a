"""Where the benchmarks keep their files: the repository, and temporary folders in its
ignored data folder (never /tmp, which is small here)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@contextmanager
def bench_dir(prefix: str = "bench-") -> Iterator[Path]:
    """A temporary folder inside data/, removed afterwards."""
    (REPO / "data").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=REPO / "data", prefix=prefix) as folder:
        yield Path(folder)
