"""The process's memory around the graph's large one-off work: the cyclic collector
paused while it builds, and the heap it freed handed back to the system after.

A start's build of the graph from the file's rows allocates an object or more per edge,
all of them kept while it builds: the collector's passes over them found nothing to
collect. At 323,000 triples the load and the build of the editable copy of the graph that
changes used until ``kg.edits`` planned them from the snapshot took 6.5 s with it,
4.5-5.8 s paused (a probe of the two alone); at 3.2 million, that build took 89 s with it
and 74 s paused (``bench.kg_memory``, one run each).

glibc keeps what a process frees for its next allocations, and each large block freed
raises the size from which it serves blocks from mappings of their own, so the arrays
and lists a change replaces end up in the heap and stay there. At 323,000 triples that
was 90-130 MiB of the graph's own 560 MiB after three changes (``bench.kg_memory``, with
this off), and ``malloc_trim`` returned it in 4-7 ms. The standard library has no call
for it, hence ``ctypes``; where the C library lacks it (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_trim: Callable[[int], int] | None = None
try:
    _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    _trim = None


def trim() -> None:
    """Return the heap's free memory to the system (after a change, after a build)."""
    if _trim is not None:
        _trim(0)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (process-wide, as the collector is); it runs
    again after, if it ran before. Reference counting frees memory as usual meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
