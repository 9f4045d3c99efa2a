"""Timers for the ingest benchmark: per-stage seconds from wrapped methods, and a stopwatch.

A stage is the time spent inside one method (``Stage(name, class, method)``), or inside
the callables ``StageClock.timed`` wraps for it (a function the product is handed, such
as the knowledge graph's embedding function). ``StageClock`` wraps the methods for the
length of a ``with`` block and puts the originals back after, so production code carries
no timing hooks. Wall and CPU seconds are both kept: on a shared machine wall time
includes waiting for a core, CPU time does not. Stages that run side by side in threads
(the graph's parse beside the chunks' embedding, ``KnowledgeService.parse_beside``)
overlap: their wall seconds can sum past the whole, and CPU seconds are the process's,
so each counts the other's too.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Stage:
    """``owner.attr``'s time (a public method; patched while the clock runs), or, with no
    owner, the time inside the callables ``StageClock.timed`` wraps for ``name``."""

    name: str
    owner: type | None = None
    attr: str = ""


class StageClock:
    """Seconds spent in each stage while ``running`` (stages must not nest)."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self._methods = [s for s in stages if s.owner is not None]
        self.wall: dict[str, float] = {s.name: 0.0 for s in stages}
        self.cpu: dict[str, float] = {s.name: 0.0 for s in stages}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        saved = [(s.owner, s.attr, s.owner.__dict__.get(s.attr)) for s in self._methods if s.owner]
        try:
            for s in self._methods:
                original = inspect.getattr_static(s.owner, s.attr)
                setattr(s.owner, s.attr, self._wrapped(s.name, original))
            yield
        finally:
            for owner, attr, original in saved:
                if original is None:  # inherited: drop the wrapper, the base's shows again
                    delattr(owner, attr)
                else:
                    setattr(owner, attr, original)

    def timed(self, name: str, fn: Callable[P, R]) -> Callable[P, R]:
        """``fn``, its calls counted in stage ``name`` (whether the clock runs or not)."""

        @functools.wraps(fn)
        def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            return self._call(name, fn, *args, **kwargs)

        return timed

    def _wrapped(self, name: str, original: Any) -> Any:
        if isinstance(original, classmethod):
            inner = original.__func__

            @functools.wraps(inner)
            def timed_cls(cls: Any, *args: Any, **kwargs: Any) -> Any:
                return self._call(name, inner, cls, *args, **kwargs)

            return classmethod(timed_cls)
        return self.timed(name, original)

    def _call(self, name: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
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
    """Wall and CPU seconds of ``with`` blocks, summed over each time it is entered."""

    seconds = 0.0
    cpu_seconds = 0.0

    def __enter__(self) -> Stopwatch:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._wall
        self.cpu_seconds += time.process_time() - self._cpu
