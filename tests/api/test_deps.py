"""Every route's dependencies, and the routes themselves, run on the event loop.

FastAPI runs a plain ``def`` dependency or route in a worker thread: a round trip per
call, about 0.1 ms each on the 2-core host, a few per request (``/admin/kg/entities``
took 1.08-1.52 ms through HTTP with its four dependencies so, 0.75-0.93 ms with them
``async``). None of them blocks: they read the runtime, compare a token, hash a key.
Blocking work is handed to a thread by the route itself (``anyio.to_thread``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from api.config import Settings
from api.main import create_app


def _calls(dependant: Dependant) -> Iterator[object]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def _on_the_loop(call: object) -> bool:
    method = call if inspect.isfunction(call) else getattr(call, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)


def test_no_route_or_dependency_runs_in_a_worker_thread(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path))
    routes = [r for r in app.routes if isinstance(r, APIRoute)]
    assert len(routes) > 20
    threaded = {
        f"{route.path}: {getattr(call, '__qualname__', type(call).__name__)}"
        for route in routes
        for call in (route.dependant.call, *_calls(route.dependant))
        if not _on_the_loop(call)
    }
    assert not threaded, sorted(threaded)
