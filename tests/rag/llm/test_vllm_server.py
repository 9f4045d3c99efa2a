"""The vLLM child's process handling, with a stand-in command (no vLLM needed)."""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

import pytest

from rag.llm.server import VLLMServer

CHATTY = "import sys\nfor i in range(20000): print('x' * 150, i)\n"


class ChattyServer(VLLMServer):
    """Prints 3 MB and exits, as a long-running vLLM logs over days."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", CHATTY]


def test_log_rotates_and_stale_temp_files_go(tmp_path: Path) -> None:
    stale = tmp_path / "tmp" / "leftover.sock"
    stale.parent.mkdir(parents=True)
    stale.touch()
    server = ChattyServer(
        tmp_path / "model", "m", 1, tmp_path, log_max_bytes=200_000, log_backups=3
    )
    server.start()
    assert not stale.exists()  # a killed child's sockets are removed before a start
    deadline = time.monotonic() + 60
    while server.is_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    server.stop()  # joins the log pump
    logs = sorted(p.name for p in tmp_path.glob("vllm.log*"))
    assert logs == ["vllm.log", "vllm.log.1", "vllm.log.2", "vllm.log.3"]
    assert all((tmp_path / name).stat().st_size <= 200_000 for name in logs)
    assert server.tail(1).endswith(" 19999")  # the newest line is in vllm.log


def run_to_its_end(server: VLLMServer, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Start the stand-in, let it exit, stop it (joining the log pump); what it logged
    as logger ``vllm``."""
    server.start()
    deadline = time.monotonic() + 60
    while server.is_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    server.stop()
    return [r.getMessage() for r in caplog.records if r.name == "vllm"]


class GreetingServer(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, "-c", "print('INFO engine ready'); print('second line')"]


def test_child_output_joins_the_service_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each line of the child's output reaches logger ``vllm`` (the service's own log
    stream, JSON or text) as well as its rotating file."""
    caplog.set_level(logging.INFO, logger="vllm")
    server = GreetingServer(tmp_path / "model", "m", 1, tmp_path)
    lines = run_to_its_end(server, caplog)
    assert lines == ["INFO engine ready", "second line"]
    assert server.tail(2) == "INFO engine ready\nsecond line"


def test_the_child_publishes_kv_events_and_names_its_hash_algorithm(tmp_path: Path) -> None:
    import json

    from rag.llm.kv_events import KVEventsEndpoint

    events = KVEventsEndpoint("ipc:///x/kv-events.sock", "ipc:///x/kv-replay.sock")
    cmd = VLLMServer(tmp_path, "m", 1, tmp_path, kv_events=events).command()
    assert cmd[cmd.index("--prefix-caching-hash-algo") + 1] == "sha256_cbor"
    config = json.loads(cmd[cmd.index("--kv-events-config") + 1])
    assert config["enable_kv_cache_events"] is True and config["publisher"] == "zmq"
    assert config["endpoint"] == events.publish and config["replay_endpoint"] == events.replay
    assert "--kv-events-config" not in VLLMServer(tmp_path, "m", 1, tmp_path).command()


PROGRESS = (
    "import sys\n"
    "w = sys.stdout.write\n"
    "w('\\rLoading shards:   0% 0/2\\rLoading shards:  50% 1/2\\rLoading shards: 100% 2/2\\n')\n"
    "w('\\rLoading shards: 100% 2/2\\n')\n"  # the bar's last state again, at its close
    "w('INFO  banner line\\r\\n')\n"
    "w('\\n')\n"
    "w('INFO engine ready\\n')\n"
)


class ProgressServer(VLLMServer):
    def command(self) -> list[str]:
        return [sys.executable, "-c", PROGRESS]


def test_progress_bars_become_one_line_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM's loading bars redraw with carriage returns, and print their last state twice:
    the log gets that state once, and no blank line."""
    caplog.set_level(logging.INFO, logger="vllm")
    server = ProgressServer(tmp_path / "model", "m", 1, tmp_path)
    lines = run_to_its_end(server, caplog)
    assert lines == ["Loading shards: 100% 2/2", "INFO  banner line", "INFO engine ready"]
    assert "\r" not in server.tail(5) and server.tail(3).splitlines() == lines


class SleepyServer(VLLMServer):
    """Never answers /health, as a vLLM still compiling."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(30)"]


def test_a_slow_start_says_it_is_still_going(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rag.llm.server import VLLMServerError

    caplog.set_level(logging.INFO, logger="rag.llm.server")
    server = SleepyServer(tmp_path / "model", "m", 9, tmp_path)  # nothing listens on port 9
    server.start()
    try:
        with pytest.raises(VLLMServerError, match="not ready after 2 s"):
            server.wait_ready(timeout_s=2.0, progress_every_s=0.6)
    finally:
        server.stop()
    progress = [r.getMessage() for r in caplog.records if "still starting" in r.getMessage()]
    assert len(progress) >= 2
    assert all(re.match(r"vLLM is still starting: \d+ s so far", line) for line in progress)
