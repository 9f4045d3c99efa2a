"""Timers for the ingest benchmark: per-stage seconds from wrapped methods, and a stopwatch.

A stage is the time spent inside one method (``(name, class, method)``). ``StageClock``
wraps those methods for the length of a ``with`` block and puts the originals back after,
so production code carries no timing hooks. Wall and CPU seconds are both kept: on a
shared machine wall time includes waiting for a core, CPU time does not.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

Stage = tuple[str, Any, str]


class StageClock:
    """Seconds spent in each stage's method while ``running`` (stages must not nest)."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self._stages = list(stages)
        self.wall: dict[str, float] = {name: 0.0 for name, _, _ in stages}
        self.cpu: dict[str, float] = {name: 0.0 for name, _, _ in stages}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        saved = [(owner, attr, owner.__dict__.get(attr)) for _, owner, attr in self._stages]
        try:
            for name, owner, attr in self._stages:
                setattr(owner, attr, self._timed(name, inspect.getattr_static(owner, attr)))
            yield
        finally:
            for owner, attr, original in saved:
                if original is None:  # inherited: drop the wrapper, the base's shows again
                    delattr(owner, attr)
                else:
                    setattr(owner, attr, original)

    def _timed(self, name: str, original: Any) -> Any:
        if isinstance(original, classmethod):
            inner = original.__func__

            @functools.wraps(inner)
            def timed_cls(cls: Any, *args: Any, **kwargs: Any) -> Any:
                return self._call(name, inner, cls, *args, **kwargs)

            return classmethod(timed_cls)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, original, *args, **kwargs)

        return timed

    def _call(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.wall[name] += time.perf_counter() - wall
            self.cpu[name] += time.process_time() - cpu

    @staticmethod
    def breakdown(seconds: dict[str, float], total: float) -> dict[str, float]:
        """Non-zero stages, rounded, plus "other": the part of ``total`` none covers."""
        stages = {k: round(v, 3) for k, v in seconds.items() if v > 0}
        stages["other"] = round(max(0.0, total - sum(seconds.values())), 3)
        return stages


class Stopwatch:
    """Wall and CPU seconds of a ``with`` block."""

    seconds = 0.0
    cpu_seconds = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.cpu_seconds = time.process_time() - self._cpu
