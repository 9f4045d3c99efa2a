"""Ingest throughput on real documents, next to the embedding model's own.

Three runs over the same documents, each on fresh stores in ``work_dir``, in-process and
without vLLM:

- raw: the chunk texts the pipeline produces, embedded with ``Embedder.embed_texts`` alone;
- chunk-only: ``KnowledgeBase.upsert`` (split, embed, Qdrant add, docstore save);
- end-to-end: ``KnowledgeService.ingest`` as ``POST /admin/documents`` runs it (the knowledge
  base, then the graph: spaCy extraction, node and triple embeddings, graph persist).

Documents go in batches of ``batch_size`` per call, as an operator's HTTP client sends them.
Stage seconds come from timers wrapped around the methods that do each stage
(``bench.stage_clock``); what no timer covers is reported as "other".

``python -m bench.ingest_rate`` runs it on the git documentation the ``git-doc`` package
installs (``user-manual.txt`` and the largest ``git-*.txt`` man pages, AsciiDoc as is).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from pydantic import BaseModel, ConfigDict
from qdrant_client import QdrantClient

from bench.stage_clock import StageClock, Stopwatch
from kg.extract import TripleExtractor
from kg.index import GraphSnapshot
from kg.store import KnowledgeGraph
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.graph_sync import GraphSync
from rag.knowledge.ingest import ChunkEmbedder, build_pipeline, document_hash, to_llama_document
from rag.knowledge.models import DEFAULT_CHUNKING, DocumentIn
from rag.knowledge.service import KnowledgeService
from rag.knowledge.state import KBState

GIT_DOC = Path("/usr/share/doc/git/html")
DEFAULT_BATCH = 20
CHUNK_TOKENS = 200  # the service's defaults (api.config)
CHUNK_OVERLAP = 20

#: (stage name, class, method): each stage is the time spent inside that method.
_STAGES: tuple[tuple[str, Any, str], ...] = (
    ("split", SentenceSplitter, "__call__"),
    ("chunk embedding", ChunkEmbedder, "__call__"),
    ("qdrant add", QdrantVectorStore, "add"),
    ("docstore save", KBState, "save"),
    ("spacy extraction", TripleExtractor, "extract_documents"),
    ("node/triple embedding", KnowledgeGraph, "_embed_missing"),
    ("graph snapshot", GraphSnapshot, "build"),
    ("graph persist", KnowledgeGraph, "save"),
)


class RunRate(BaseModel):
    """One run: how long it took and what it produced."""

    model_config = ConfigDict(frozen=True)

    seconds: float
    cpu_seconds: float  # this process's CPU time: steadier than wall time on a shared machine
    chunks: int
    words: int
    stages: dict[str, float] = {}  # wall seconds per stage
    cpu_stages: dict[str, float] = {}  # CPU seconds per stage

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0

    @property
    def words_per_s(self) -> float:
        return self.words / self.seconds if self.seconds else 0.0

    @property
    def chunks_per_cpu_s(self) -> float:
        return self.chunks / self.cpu_seconds if self.cpu_seconds else 0.0


class IngestRate(BaseModel):
    """Raw embedding, chunk-only and end-to-end ingest rates on the same documents."""

    model_config = ConfigDict(frozen=True)

    documents: int
    batch_size: int
    embedder_threads: int
    raw: RunRate
    chunk_only: RunRate
    end_to_end: RunRate
    triples: int
    nodes: int

    @property
    def ratio(self) -> float:
        """End-to-end chunks/s over raw embedding chunks/s."""
        return self.end_to_end.chunks_per_s / self.raw.chunks_per_s

    @property
    def cpu_ratio(self) -> float:
        """The same ratio in chunks per CPU second (what contention does not change)."""
        return self.end_to_end.chunks_per_cpu_s / self.raw.chunks_per_cpu_s

    def table(self) -> str:
        """The rates and the per-stage seconds, as aligned text."""
        rows = [
            f"documents {self.documents}, {self.raw.words} words, {self.raw.chunks} chunks; "
            f"batches of {self.batch_size} per call; embedder threads {self.embedder_threads}",
            f"{'run':<12}{'s':>8}{'chunks/s':>10}{'words/s':>9}{'of raw':>8}"
            f"{'cpu s':>8}{'chunks/cpu s':>14}{'of raw':>8}",
        ]
        for name, run in (
            ("raw", self.raw),
            ("chunk-only", self.chunk_only),
            ("end-to-end", self.end_to_end),
        ):
            share = run.chunks_per_s / self.raw.chunks_per_s
            cpu_share = run.chunks_per_cpu_s / self.raw.chunks_per_cpu_s
            rows.append(
                f"{name:<12}{run.seconds:>8.1f}{run.chunks_per_s:>10.1f}{run.words_per_s:>9.0f}"
                f"{share:>8.0%}{run.cpu_seconds:>8.1f}{run.chunks_per_cpu_s:>14.1f}"
                f"{cpu_share:>8.0%}"
            )
        rows.append(f"graph: {self.triples} triples, {self.nodes} nodes")
        runs = (self.chunk_only, self.end_to_end)
        rows.append(f"{'stage seconds':<24}{'chunk-only':>11}{'end-to-end':>11}{'(cpu)':>8}")
        for name in dict.fromkeys([*self.chunk_only.stages, *self.end_to_end.stages]):
            rows.append(
                f"{name:<24}{runs[0].stages.get(name, 0.0):>11.2f}"
                f"{runs[1].stages.get(name, 0.0):>11.2f}{runs[1].cpu_stages.get(name, 0.0):>8.2f}"
            )
        return "\n".join(rows)


def _rate(watch: Stopwatch, chunks: int, words: int, clock: StageClock) -> RunRate:
    return RunRate(
        seconds=watch.seconds,
        cpu_seconds=watch.cpu_seconds,
        chunks=chunks,
        words=words,
        stages=clock.breakdown(clock.wall, watch.seconds),
        cpu_stages=clock.breakdown(clock.cpu, watch.cpu_seconds),
    )


def _batches(documents: Sequence[DocumentIn], size: int) -> list[Sequence[DocumentIn]]:
    return [documents[i : i + size] for i in range(0, len(documents), size)]


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _open_kb(folder: Path, embedder: Embedder) -> KnowledgeBase:
    client = QdrantClient(path=str(folder / "qdrant"))
    return KnowledgeBase(
        folder, client, embedder, chunk_tokens=CHUNK_TOKENS, chunk_overlap_tokens=CHUNK_OVERLAP
    )


def _measure_raw(documents: Sequence[DocumentIn], embedder: Embedder) -> RunRate:
    """Split exactly as the knowledge base does, then time ``embed_texts`` alone."""
    splitter = build_pipeline(embedder, CHUNK_TOKENS, CHUNK_OVERLAP).transformations[0]
    nodes = splitter([to_llama_document(d, document_hash(d, DEFAULT_CHUNKING)) for d in documents])
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    with Stopwatch() as watch:
        embedder.embed_texts(texts)
    return RunRate(
        seconds=watch.seconds,
        cpu_seconds=watch.cpu_seconds,
        chunks=len(texts),
        words=_words(documents),
    )


def _measure_chunk_only(
    documents: Sequence[DocumentIn], folder: Path, embedder: Embedder, batch_size: int
) -> RunRate:
    kb = _open_kb(folder, embedder)
    clock = StageClock(_STAGES)
    try:
        with clock.running(), Stopwatch() as watch:
            for batch in _batches(documents, batch_size):
                kb.upsert(batch)
        chunks = kb.count_chunks()
    finally:
        kb.close()
    return _rate(watch, chunks, _words(documents), clock)


def _measure_end_to_end(
    documents: Sequence[DocumentIn], folder: Path, embedder: Embedder, batch_size: int
) -> tuple[RunRate, KnowledgeGraph]:
    kb = _open_kb(folder, embedder)
    graph = KnowledgeGraph(folder / "kg", embedder.embed_texts)
    extractor = TripleExtractor()
    extractor.extract("Warm the parser up before timing.")  # model load is start-up cost
    knowledge = KnowledgeService(kb, GraphSync(kb, graph, extractor))
    clock = StageClock(_STAGES)
    try:
        with clock.running(), Stopwatch() as watch:
            for batch in _batches(documents, batch_size):
                anyio.run(knowledge.ingest, batch)
        chunks = kb.count_chunks()
    finally:
        kb.close()
    return _rate(watch, chunks, _words(documents), clock), graph


def _words(documents: Sequence[DocumentIn]) -> int:
    return sum(len(d.text.split()) for d in documents)


def measure_ingest(
    documents: Sequence[DocumentIn],
    work_dir: Path,
    log: Callable[[str], None],
    *,
    batch_size: int = DEFAULT_BATCH,
    embedder: Embedder | None = None,
) -> IngestRate:
    """Measure raw, chunk-only and end-to-end ingest of ``documents`` (stores in ``work_dir``)."""
    embedder = embedder or shared_embedder()
    embedder.warm_up()
    embedder.embed_texts(["Load the model's kernels before timing."])
    log(f"ingest rate: {len(documents)} documents, {_words(documents)} words")
    raw = _measure_raw(documents, embedder)
    log(f"raw embedding: {raw.chunks} chunks in {raw.seconds:.1f} s")
    chunk_only = _measure_chunk_only(
        documents, _fresh(work_dir / "chunk_only"), embedder, batch_size
    )
    log(f"chunk-only ingest: {chunk_only.seconds:.1f} s")
    end_to_end, graph = _measure_end_to_end(
        documents, _fresh(work_dir / "end_to_end"), embedder, batch_size
    )
    log(f"end-to-end ingest: {end_to_end.seconds:.1f} s")
    return IngestRate(
        documents=len(documents),
        batch_size=batch_size,
        embedder_threads=embedder._threads,
        raw=raw,
        chunk_only=chunk_only,
        end_to_end=end_to_end,
        triples=graph.edge_count,
        nodes=graph.node_count,
    )


def git_doc_documents(folder: Path = GIT_DOC, man_pages: int = 45) -> list[DocumentIn]:
    """``user-manual.txt`` plus the ``man_pages`` largest ``git-*.txt`` pages, whole."""
    pages = sorted(folder.glob("git-*.txt"), key=lambda p: (-p.stat().st_size, p.name))
    paths = [folder / "user-manual.txt", *pages[:man_pages]]
    return [DocumentIn(id=f"git-doc/{p.name}", text=p.read_text(encoding="utf-8")) for p in paths]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=Path("data/bench/ingest_rate"))
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    parser.add_argument("--man-pages", type=int, default=45)
    args = parser.parse_args(argv)
    if not (GIT_DOC / "user-manual.txt").exists():
        sys.exit(f"{GIT_DOC} has no user-manual.txt: install the git-doc package")
    documents = git_doc_documents(man_pages=args.man_pages)
    rate = measure_ingest(
        documents,
        args.work_dir,
        lambda m: print(m, file=sys.stderr, flush=True),
        batch_size=args.batch_size,
    )
    print(rate.table())


if __name__ == "__main__":
    main()
