"""Start-up and memory of the service itself on a large knowledge base, through the product path.

Builds a data folder the way the scale section grows its collection (``bench.scale_copies``:
real chunk texts and their embeddings, then noisy copies, committed through the knowledge
base's state) and, unless ``--no-graph``, a knowledge graph sized like the real corpus's
(3.23 triples and 2.09 entities per chunk, ``GRAPH_PER_CHUNK``; random unit vectors), filed
under the knowledge base's documents with their versions, so the start finds nothing to
re-sync. Then it starts ``python -m api serve`` on the folder as an operator would, against
a vLLM child already running (its own start is not counted: the start-up target is "30 s
plus vLLM's own start"), and measures:

- ``health_s``: process start to ``/health`` (imports, the embedding model, the stores
  opened: the index's process, the knowledge base's state, the graph, the warm registry);
- ``ready_s``: to ``/ready`` (adds the vLLM probe and the warmup's start);
- the RSS of the service's process at ``/ready`` and once its log says the graph for
  changes is built (settled), its peak, and the RSS of the index's process;
- one chat through HTTP (its retrieval is the first on the freshly opened index).

An empty data folder is started the same way first: the baseline, what a start costs
without a knowledge base.

    .venv/bin/python -m bench.scale_startup [--sizes 100000] [--no-graph]
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
from pathlib import Path

import httpx
import numpy as np
from llama_index.core.schema import BaseNode, Document

from api.config import Settings
from api.schemas import ChatResponse
from api.server import free_port
from bench.harness import MODEL_NAME, vllm
from bench.kg_subgraph import RandomEmbedder, entity_name
from bench.paths import bench_dir
from bench.scale_copies import Chunk, copies_between
from bench.scale_records import StartUpRow
from kg import KnowledgeGraph, Triple, snapshot_file
from rag.knowledge.edge import EdgeIndex
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.state import KBState

#: The real corpus's graph per chunk (1,047 chunks: 3,384 triples, 2,193 entities).
GRAPH_PER_CHUNK = (3384 / 1047, 2193 / 1047)
PREDICATES = ["part of", "located in", "created by", "depends on", "uses", "owns", "near"]
READY_TIMEOUT_S = 1800.0
#: What the service logs once the graph that changes edit is built (``kg.store``).
GRAPH_BUILT = "ready for changes"
#: Chunks whose documents ``build_graph`` files through one graph before it closes it.
BUILD_BATCH_CHUNKS = 100_000
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
    index_rss_mib: int
    first_chat_s: float
    passages: int
    first_change_s: float  # one small document's ingest, which builds the graph's edit side
    settled_anon_mib: int  # of settled_rss_mib, the process's own memory (RssAnon)


def build_kb(
    folder: Path, chunks: list[Chunk], vectors: np.ndarray, size: int, log: Callable[[str], None]
) -> dict[str, tuple[str, int]]:
    """``size`` points in the service's own index and state under ``folder`` (its data
    directory), each document's chunks committed through ``KBState.put`` as an ingest
    commits them; returns each document's (content hash, chunk count)."""
    settings = Settings(data_dir=folder)
    index = EdgeIndex(settings.edge_path, vectors.shape[1])
    index.open()
    state = KBState.open(folder)
    state.start_loose_log()  # as a folder the service made has it: a start checks no scan
    documents: dict[str, tuple[str, int]] = {}
    rng = np.random.default_rng(17)
    started = time.perf_counter()
    done = 0
    held: list[BaseNode] = []  # a document's first chunks, when its last is in the next batch
    try:
        for nodes in copies_between(chunks, vectors, 0, size, rng):
            index.add(nodes)
            held.extend(nodes)
            last = held[-1].ref_doc_id
            complete = [n for n in held if n.ref_doc_id != last]
            held = [n for n in held if n.ref_doc_id == last]
            commit_documents(state, complete, documents)
            done += len(nodes)
            if done % 50_000 == 0:
                log(f"  {done} points in {time.perf_counter() - started:.0f} s")
        commit_documents(state, held, documents)
        log(f"  HNSW build for {size} points ...")
        index.optimize()
        state.version += 1
        state.save()  # the commit point
    finally:
        index.close()
        state.close()
    return documents


def commit_documents(
    state: KBState, nodes: list[BaseNode], documents: dict[str, tuple[str, int]]
) -> None:
    """Make the documents of ``nodes`` (each document's chunks all there) current."""
    by_doc: dict[str, list[BaseNode]] = {}
    for node in nodes:
        by_doc.setdefault(node.ref_doc_id or "", []).append(node)
    docs = []
    for doc_id, doc_nodes in by_doc.items():
        doc_hash = str(doc_nodes[0].metadata[DOC_HASH_KEY])
        docs.append(Document(id_=doc_id, text="", metadata={DOC_HASH_KEY: doc_hash}))
        documents[doc_id] = (doc_hash, len(doc_nodes))
    state.put(docs, nodes, {})


def build_graph(
    folder: Path,
    documents: dict[str, tuple[str, int]],
    with_triples: bool = True,
    keep_snapshot: bool = False,
) -> tuple[int, int]:
    """A graph at ``folder/kg`` with the real corpus's triples and entities per chunk for
    each document (none without ``with_triples``: documents that yield no triples), filed
    with the document's version as the service's sync files them, so a start finds
    nothing to re-sync; returns (triples, entities).

    The documents are filed ``BUILD_BATCH_CHUNKS`` chunks at a time, each batch by a graph
    opened on what the last one saved at its close, as a service that ingests and
    restarts would: the vectors of earlier batches stay in their mapped files, so a
    build of 1,000,000 chunks (3.2 million triples, 8 GB of vectors) fits in memory.
    The snapshot the last close saved is removed unless ``keep_snapshot``: the first
    start then reads every row, as after a crash."""
    rng = np.random.default_rng(5)
    chunk_count = sum(n for _, n in documents.values())
    per_chunk, entities_per_chunk = GRAPH_PER_CHUNK if with_triples else (0.0, 0.0)
    entities = max(1, round(entities_per_chunk * chunk_count))
    weights = 1.0 / (np.arange(entities) + 10.0) ** 0.9
    weights /= weights.sum()
    counts = rng.poisson(per_chunk * np.array([n for _, n in documents.values()]))
    ends = rng.choice(entities, size=(int(counts.sum()), 2), p=weights)
    ends[:entities, 0] = rng.permutation(entities)[: len(ends)]  # every entity used once
    same = ends[:, 0] == ends[:, 1]
    ends[same, 1] = (ends[same, 1] + 1) % entities
    batch: dict[str, list[Triple]] = {}
    batch_chunks, first, filed = 0, 0, (0, 0)
    for (doc_id, (_, chunks)), count in zip(documents.items(), counts, strict=True):
        batch[doc_id] = [
            Triple(
                subject=entity_name(int(s)),
                predicate=PREDICATES[i % len(PREDICATES)],
                object=entity_name(int(o)),
                doc_id=doc_id,
                chunk_id=f"{doc_id}#{i % chunks}",
                source="extracted",
            )
            for i, (s, o) in enumerate(ends[first : first + count])
        ]
        first += count
        batch_chunks += chunks
        if batch_chunks >= BUILD_BATCH_CHUNKS:
            filed = _file_batch(folder / "kg", batch, documents, seed=first)
            batch, batch_chunks = {}, 0
    if batch:
        filed = _file_batch(folder / "kg", batch, documents, seed=first)
    if not keep_snapshot:
        snapshot_file.discard(folder / "kg")
    return filed


def _file_batch(
    folder: Path, batch: dict[str, list[Triple]], documents: dict[str, tuple[str, int]], seed: int
) -> tuple[int, int]:
    """File ``batch`` through a graph on ``folder``, closed after (its snapshot saved)."""
    graph = KnowledgeGraph(folder, RandomEmbedder(seed=seed))
    try:
        graph.replace_documents(batch, {d: documents[d][0] for d in batch})
        return graph.edge_count, graph.node_count
    finally:
        graph.close()


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
    folder: Path, vllm_url: str, question: str, log: Callable[[str], None]
) -> ServiceStart:
    """Start ``python -m api serve`` on ``folder``, time it to ``/health`` and ``/ready``,
    read its memory, ask one question and stop it."""
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
                f"  RSS {service_rss} MiB at /ready, {settled} MiB settled "
                f"({settled_anon} MiB its own), index {index_rss} MiB"
            )
            return ServiceStart(
                health_s=round(health_s, 2),
                ready_s=round(ready_s, 2),
                service_rss_mib=service_rss,
                settled_rss_mib=settled,
                service_peak_mib=rss_mib(proc.pid, "VmHWM"),
                index_rss_mib=index_rss,
                first_chat_s=round(chat_s, 2),
                passages=passages,
                first_change_s=round(change_s, 2),
                settled_anon_mib=settled_anon,
            )
    except BaseException:
        out.flush()
        log("the service's log ends:\n" + "\n".join(
            (folder / "service.log").read_text().splitlines()[-30:]
        ))  # fmt: skip
        raise
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()


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
) -> list[StartUpRow]:
    """An empty folder (the baseline), then one of each size, each started on the vLLM at
    ``vllm_url`` (else on a vLLM child of this run). ``work``: the caller's folder;
    ``chunks`` and their ``vectors``: what the copies are made of."""
    if vllm_url is None:
        with vllm(kv_cache_gib=2, enforce_eager=True, log=log) as url:
            return run(sizes, graph, work, chunks, vectors, log, url)
    results: list[StartUpRow] = []
    question = f"What is {chunks[0].text.split()[0]}?"
    for size in [0, *sizes]:
        folder = work / f"data-{size}"
        folder.mkdir(parents=True)
        log(f"start-up: {size} chunks, graph {'on' if graph and size else 'off'}: building")
        t0 = time.perf_counter()
        documents = build_kb(folder, chunks, vectors, size, log) if size else {}
        triples, entities = build_graph(folder, documents, graph) if size else (0, 0)
        build_s = time.perf_counter() - t0
        log(f"  built in {build_s:.0f} s ({triples} triples, {entities} entities)")
        # The first start builds the graph's snapshot from its rows, as after a crash;
        # its clean stop saves it, and the second start reads it back.
        for after_stop in (False, True) if size else (False,):
            start = start_service(folder, vllm_url, question, log)
            results.append(
                StartUpRow(
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--no-graph", action="store_true", help="no knowledge graph")
    args = parser.parse_args()
    from bench.scale import ingest_towns  # bench.scale runs this module's ``run``

    with bench_dir() as work:
        _, chunks, vectors = ingest_towns(60, work / "ingest", shared_embedder())
        rows = run(
            args.sizes,
            not args.no_graph,
            work,
            chunks,
            vectors,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    for row in rows:
        print(row.model_dump_json())


if __name__ == "__main__":
    main()
