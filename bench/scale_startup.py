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
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from itertools import zip_longest
from pathlib import Path

import numpy as np

from bench.entity_vectors import VectorShape, real_entity_shape, real_questions
from bench.harness import vllm
from bench.kg_subgraph import entity_name
from bench.machine import this_machine
from bench.paths import bench_dir
from bench.scale_copies import Chunk
from bench.scale_folder import build_graph, build_kb
from bench.scale_records import StartUpRow
from bench.service_start import PACE_S, start_service
from kg import snapshot_file
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.state import KBState

#: Retrievals after the first change, as ``bench.kg_memory``'s selections (300 there too).
QUESTIONS = 300
#: Retrievals after those, one every ``bench.service_start.PACE_S``.
PACED_QUESTIONS = 60


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
