"""Serve the app from a background thread over real HTTP: tests and benchmarks run
warmrag this way, next to the code that measures it."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import uvicorn
from fastapi import FastAPI

from api.runtime import Runtime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThreadedServer:
    """uvicorn in a daemon thread on a loopback port; ``stop`` runs the app's shutdown."""

    def __init__(self, app: FastAPI, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime

    def start(self, wait_ready: bool = True, timeout_s: float = 600.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the app failed to start (see its log above)")
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start in time")
            time.sleep(0.05)
        if not wait_ready:
            return
        while True:
            resp = httpx.get(f"{self.url}/ready", timeout=10)
            if resp.status_code == 200:
                return
            if resp.json().get("phase") == "failed" or time.monotonic() > deadline:
                raise RuntimeError(f"not ready: {resp.text}")
            time.sleep(0.1)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=60)
