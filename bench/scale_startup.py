"""Start-up and memory of the service itself on a large knowledge base, through the product path.

Builds a data folder the way the scale section grows its collection (``bench.scale_copies``:
real chunk texts and their embeddings, then noisy copies, committed through the knowledge
base's state) and, unless ``--no-graph``, a knowledge graph sized like the real corpus's
(3.23 triples and 2.09 entities per chunk, ``GRAPH_PER_CHUNK``; vectors drawn like the real
entities', ``bench.entity_vectors``), filed
under the knowledge base's documents with their versions, so the start finds nothing to
re-sync. Then it starts ``python -m api serve`` on the folder as an operator would, against
a vLLM child already running (its own start is not counted: the start-up target is "30 s
plus vLLM's own start"), and measures:

- ``health_s``: process start to ``/health`` (imports, the embedding model, the stores
  opened: the index's process, the knowledge base's state, the graph, the warm registry);
- ``ready_s``: to ``/ready`` (adds the vLLM probe and the warmup's start);
- the RSS of the service's process at ``/ready`` and once its log says the graph for
  changes is built (settled), its peak, and the RSS of the index's process;
- one chat through HTTP (its retrieval is the first on the freshly opened index);
- then ``--questions`` retrievals through ``/admin/kg/subgraph`` (exactly what a chat would
  retrieve: the question embedded, the index searched, the graph's facts selected; no
  generation), alternately one naming one of the graph's entities and one of the real
  corpus's questions (which link to entities by embedding), with their latency, the facts
  they injected, and the RSS of both processes after them: the graph reads its
  candidates' vectors as questions come, so the settled RSS alone would understate what
  a serving process holds;
- then ``--paced`` more, one every ``PACE_S`` (the pause not counted): questions that
  come further apart than the caches keep a question's working set, as a chat service's
  usually do, find it in memory again. On the 2-core Xeon with AMX (2026-12-06) the
  question's embedding took 3.0-3.3 ms p50 back to back and 5.5-6.2 ms with 30 ms to
  1 s between questions, even with the core kept busy between them; a retrieval at
  100,000 chunks 13.4-14.5 ms against 17.8-18.7 ms;
- its clean stop (the graph's snapshot saved), then the next start reads it back.

An empty data folder is started the same way first: the baseline, what a start costs
without a knowledge base.

    .venv/bin/python -m bench.scale_startup [--sizes 100000] [--no-graph] [--questions 300]
        [--paced 60]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path

import httpx
import numpy as np

from api.schemas import ChatResponse
from api.server import free_port
from bench.entity_vectors import VectorShape, real_entity_shape, real_questions
from bench.harness import MODEL_NAME, vllm
from bench.kg_subgraph import entity_name
from bench.machine import this_machine
from bench.measure import percentile
from bench.paths import bench_dir
from bench.scale_copies import Chunk
from bench.scale_folder import build_graph, build_kb
from bench.scale_records import StartUpRow
from kg import snapshot_file
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.state import KBState

READY_TIMEOUT_S = 1800.0
#: What the service logs once its graph is ready for changes (``kg.store``).
GRAPH_BUILT = "ready for changes"
#: Retrievals after the first change, as ``bench.kg_memory``'s selections (300 there too).
QUESTIONS = 300
#: Retrievals after those, one every ``PACE_S``.
PACED_QUESTIONS = 60
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


def run(
    sizes: Sequence[int],
    graph: bool,
    work: Path,
    chunks: list[Chunk],
    vectors: np.ndarray,
    log: Callable[[str], None] = print,
    vllm_url: str | None = None,
    questions: int = QUESTIONS,
    paced: int = PACED_QUESTIONS,
    embedding: str | None = None,
    shape: VectorShape | None = None,
    real: Sequence[str] | None = None,
) -> list[StartUpRow]:
    """An empty folder (the baseline), then one of each size, each started on the vLLM at
    ``vllm_url`` (else on a vLLM child of this run). ``work``: the caller's folder;
    ``chunks`` and their ``vectors``: what the copies are made of, ``embedding`` the
    identity of the embedder that made them (None: the shared embedder's); ``questions``:
    the retrievals each start serves before it is measured again, half of them from
    ``real``, then ``paced`` more one every ``PACE_S``; ``shape``: what the graph's vectors
    are drawn with (both None: the real corpus's, ``bench.entity_vectors``)."""
    embedding = embedding or shared_embedder().identity
    if vllm_url is None:
        with vllm(kv_cache_gib=2, enforce_eager=True, log=log) as url:
            return run(
                sizes, graph, work, chunks, vectors, log, url, questions, paced, embedding,
                shape, real,
            )  # fmt: skip
    results: list[StartUpRow] = []
    question = f"What is {chunks[0].text.split()[0]}?"
    if graph and any(sizes):
        shape = shape or real_entity_shape()
    real = real_questions() if real is None else real
    for size in [0, *sizes]:
        folder = work / f"data-{size}"
        folder.mkdir(parents=True)
        log(f"start-up: {size} chunks, graph {'on' if graph and size else 'off'}: building")
        t0 = time.perf_counter()
        documents = build_kb(folder, chunks, vectors, size, log, embedding) if size else {}
        triples, entities = (
            build_graph(folder, documents, graph, log=log, shape=shape) if size else (0, 0)
        )
        build_s = time.perf_counter() - t0
        log(f"  built in {build_s:.0f} s ({triples} triples, {entities} entities)")
        # The first start builds the graph's snapshot from its rows, as after a crash;
        # its clean stop saves it, and the second start reads it back.
        asked = asked_questions(entities, questions + paced, real)
        for after_stop in (False, True) if size else (False,):
            start = start_service(
                folder, vllm_url, question, log, asked[:questions], asked[questions:]
            )
            if graph and size and not (folder / "kg" / snapshot_file.FILE).is_file():
                raise RuntimeError("the clean stop saved no graph snapshot to start from")
            results.append(
                StartUpRow(
                    embedding=recorded_embedding(folder),
                    chunks=size,
                    triples=triples,
                    entities=entities,
                    after_stop=after_stop,
                    build_s=round(build_s, 1),
                    **asdict(start),
                )
            )
        shutil.rmtree(folder)  # a 1M-chunk folder is gigabytes
    return results


def recorded_embedding(folder: Path) -> str:
    """The embedder the knowledge base in ``folder`` records (a stopped service's): the
    one its start embedded with."""
    state = KBState.open(folder)
    try:
        return state.recorded_embedding() or ""
    finally:
        state.close()


def entity_questions(entities: int, count: int) -> list[str]:
    """``count`` questions, each naming a random one of the graph's ``entities`` (one
    of the first names ``build_graph`` gives when there is none), as ``bench.kg_subgraph``
    asks them; the same for each start on a folder."""
    picked = np.random.default_rng(7).integers(max(1, entities), size=count)
    return [f"How is {entity_name(int(i))} related to the rest of the system?" for i in picked]


def asked_questions(entities: int, count: int, real: Sequence[str]) -> list[str]:
    """``count`` questions, alternately one naming an entity (``entity_questions``) and
    one of the ``real`` ones (in order, from the first)."""
    picked = [real[i % len(real)] for i in range(count // 2)] if real else []
    named = entity_questions(entities, count - len(picked))
    return [q for pair in zip_longest(named, picked) for q in pair if q is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--no-graph", action="store_true", help="no knowledge graph")
    parser.add_argument(
        "--questions", type=int, default=QUESTIONS, help="retrievals served at each start"
    )
    parser.add_argument(
        "--paced", type=int, default=PACED_QUESTIONS, help=f"then these, {PACE_S} s apart"
    )
    args = parser.parse_args()
    from bench.scale import ingest_towns  # bench.scale runs this module's ``run``

    # Its absolute latencies belong to the host state this records (``bench.machine``).
    print(f"machine: {this_machine(enforce_eager=True).summary}", file=sys.stderr, flush=True)
    with bench_dir() as work:
        embedder = shared_embedder()
        _, chunks, vectors = ingest_towns(60, work / "ingest", embedder)
        rows = run(
            args.sizes,
            not args.no_graph,
            work,
            chunks,
            vectors,
            log=lambda line: print(line, file=sys.stderr, flush=True),
            questions=args.questions,
            paced=args.paced,
            embedding=embedder.identity,
        )
    for row in rows:
        print(row.model_dump_json())


if __name__ == "__main__":
    main()
