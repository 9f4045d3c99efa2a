"""One start of ``python -m api serve`` on a data folder, timed and measured through HTTP
as an operator meets it: to ``/health`` and ``/ready``, its memory and its index
process's, one chat, one change, retrievals back to back and paced, then its clean stop.
``bench.scale_startup`` runs it on the folders it builds; ``bench.kg_memory`` reads
memory the same way (``rss_mib``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from api.schemas import ChatResponse
from api.server import free_port
from bench.harness import MODEL_NAME
from bench.measure import percentile

READY_TIMEOUT_S = 1800.0
#: What the service logs once its graph is ready for changes (``kg.store``).
GRAPH_BUILT = "ready for changes"
PACE_S = 0.1
#: A clean stop saves the graph's snapshot: at 1M chunks, several GB of vectors.
STOP_TIMEOUT_S = 900.0
FIRST_CHANGE = "Lyon lies on the Rhone. Lyon hosts a festival of lights every December."
TOKEN = "scale-startup-token"


@dataclass(frozen=True)
class ServiceStart:
    """One start of the service on a data folder (seconds from the process's start)."""

    health_s: float
    ready_s: float
    service_rss_mib: int
    settled_rss_mib: int
    service_peak_mib: int
    ready_peak_mib: int  # the peak by /ready: the start's, before the first change
    index_rss_mib: int
    first_chat_s: float
    passages: int
    first_change_s: float  # one small document's ingest, which builds the graph's edit side
    settled_anon_mib: int  # of settled_rss_mib, the process's own memory (RssAnon)
    questions: int
    question_p50_ms: float
    question_p99_ms: float
    question_facts: float  # facts injected, per question
    paced: int  # then these, one every PACE_S
    paced_p50_ms: float
    paced_p99_ms: float
    questions_rss_mib: int  # the service's, after the questions
    questions_anon_mib: int
    questions_index_rss_mib: int
    stop_s: float  # SIGTERM to exit: the clean stop, which saves the graph's snapshot


def rss_mib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024)
    return 0


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(c) for c in text)
    return found


def start_service(
    folder: Path,
    vllm_url: str,
    question: str,
    log: Callable[[str], None],
    questions: Sequence[str] = (),
    paced: Sequence[str] = (),
) -> ServiceStart:
    """Start ``python -m api serve`` on ``folder``, time it to ``/health`` and ``/ready``,
    read its memory, ask one question, make one change, retrieve for each of
    ``questions`` back to back, read its memory again, retrieve for each of ``paced`` one
    every ``PACE_S``, and stop it cleanly (a stop that does not end in
    ``STOP_TIMEOUT_S`` is killed and raises: the next start would not be one after a
    clean stop)."""
    port = free_port()
    env = {
        **os.environ,
        "WARMRAG_DATA_DIR": str(folder),
        "WARMRAG_VLLM_URL": vllm_url,
        "WARMRAG_SERVED_MODEL_NAME": MODEL_NAME,
        "WARMRAG_SEED_SAMPLE_KB": "false",
        "WARMRAG_ADMIN_TOKEN": TOKEN,
        "WARMRAG_PORT": str(port),
        "WARMRAG_MAX_TOKENS": "2",
    }
    out = open(folder / "service.log", "w")  # noqa: SIM115 - closed below
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "api", "serve"],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: a signal to it never reaches the bench
    )
    health_s = ready_s = 0.0
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            while time.perf_counter() - started < READY_TIMEOUT_S:
                if proc.poll() is not None:
                    raise RuntimeError(f"the service exited ({proc.returncode}); see its log")
                try:
                    if not health_s and client.get("/health").status_code == 200:
                        health_s = time.perf_counter() - started
                    if health_s and client.get("/ready").status_code == 200:
                        ready_s = time.perf_counter() - started
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            else:
                raise TimeoutError(f"not ready in {READY_TIMEOUT_S:.0f} s")
            service_rss = rss_mib(proc.pid)
            ready_peak = rss_mib(proc.pid, "VmHWM")  # the start's own peak
            index_rss = sum(rss_mib(c) for c in children(proc.pid))
            t0 = time.perf_counter()
            resp = client.post("/v1/chat", json={"question": question})
            resp.raise_for_status()
            chat_s = time.perf_counter() - t0
            passages = len(ChatResponse.model_validate(resp.json()).passages)
            # The first change builds what the graph's changes edit (a start leaves it).
            t0 = time.perf_counter()
            resp = client.post(
                "/admin/documents",
                # A new document each start: an unchanged one would change nothing.
                json={"documents": [{"id": f"first-change-{port}", "text": FIRST_CHANGE}]},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            resp.raise_for_status()
            change_s = time.perf_counter() - t0
            wait_for_line(folder / "service.log", GRAPH_BUILT, proc)
            settled = rss_mib(proc.pid)
            settled_anon = rss_mib(proc.pid, "RssAnon")
            log(
                f"  /health {health_s:.1f} s, /ready {ready_s:.1f} s, first change {change_s:.1f} s"
            )
            log(
                f"  RSS {service_rss} MiB at /ready (peak {ready_peak}), {settled} MiB settled "
                f"({settled_anon} MiB its own), index {index_rss} MiB"
            )
            took, facts = ask(client, questions)
            asked_rss, asked_anon = rss_mib(proc.pid), rss_mib(proc.pid, "RssAnon")
            asked_index = sum(rss_mib(c) for c in children(proc.pid))
            peak = rss_mib(proc.pid, "VmHWM")
            p50, p99 = (percentile(took, q) if took else 0.0 for q in (50, 99))
            log(
                f"  {len(took)} questions: p50 {p50:.1f} ms, p99 {p99:.1f} ms; RSS {asked_rss} "
                f"MiB ({asked_anon} MiB its own), index {asked_index} MiB, peak {peak} MiB"
            )
            spaced, _ = ask(client, paced, pause_s=PACE_S)
            paced_p50, paced_p99 = (percentile(spaced, q) if spaced else 0.0 for q in (50, 99))
            if spaced:
                log(
                    f"  {len(spaced)} more, {PACE_S} s apart: p50 {paced_p50:.1f} ms, "
                    f"p99 {paced_p99:.1f} ms"
                )
            stop_s = stop(proc)
            log(f"  stopped in {stop_s:.1f} s")
            return ServiceStart(
                health_s=round(health_s, 2),
                ready_s=round(ready_s, 2),
                service_rss_mib=service_rss,
                settled_rss_mib=settled,
                service_peak_mib=peak,
                ready_peak_mib=ready_peak,
                index_rss_mib=index_rss,
                first_chat_s=round(chat_s, 2),
                passages=passages,
                first_change_s=round(change_s, 2),
                settled_anon_mib=settled_anon,
                questions=len(took),
                question_p50_ms=round(p50, 2),
                question_p99_ms=round(p99, 2),
                question_facts=round(sum(facts) / len(facts), 2) if facts else 0.0,
                paced=len(spaced),
                paced_p50_ms=round(paced_p50, 2),
                paced_p99_ms=round(paced_p99, 2),
                questions_rss_mib=asked_rss,
                questions_anon_mib=asked_anon,
                questions_index_rss_mib=asked_index,
                stop_s=round(stop_s, 2),
            )
    except BaseException:
        out.flush()
        log("the service's log ends:\n" + "\n".join(
            (folder / "service.log").read_text().splitlines()[-30:]
        ))  # fmt: skip
        raise
    finally:
        if proc.poll() is None:  # a measurement failed: no clean stop to wait for
            proc.kill()
            proc.wait()
        out.close()


def ask(
    client: httpx.Client, questions: Sequence[str], pause_s: float = 0.0
) -> tuple[list[float], list[int]]:
    """Milliseconds of each question's retrieval through ``/admin/kg/subgraph``, and the
    facts it injected; ``pause_s`` before each question, not counted."""
    took, facts = [], []
    for question in questions:
        if pause_s:
            time.sleep(pause_s)
        t0 = time.perf_counter()
        resp = client.get(
            "/admin/kg/subgraph",
            params={"question": question},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        resp.raise_for_status()
        took.append((time.perf_counter() - t0) * 1000)
        facts.append(len(resp.json()["triples"]))
    return took, facts


def stop(proc: subprocess.Popen[bytes]) -> float:
    """Seconds of the service's clean stop (SIGTERM, as an operator's stop sends)."""
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the service did not stop in {STOP_TIMEOUT_S:.0f} s") from None
    if proc.returncode not in (0, -signal.SIGTERM):  # uvicorn raises the signal again after
        raise RuntimeError(f"the service's stop exited {proc.returncode}; see its log")
    return time.perf_counter() - t0


def wait_for_line(path: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    """Until the service's log has ``text`` (it logs the events this bench waits on)."""
    started = time.perf_counter()
    while text not in path.read_text(errors="replace"):
        if proc.poll() is not None or time.perf_counter() - started > READY_TIMEOUT_S:
            raise RuntimeError(f"the service's log never said {text!r}")
        time.sleep(0.2)
