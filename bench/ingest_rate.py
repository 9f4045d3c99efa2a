"""Ingest throughput on real documents, next to the embedding model's own.

Three runs over the same documents, each on fresh stores in ``work_dir``, in-process and
without vLLM:

- raw: the chunk texts the pipeline produces, embedded with ``Embedder.embed_texts`` alone;
- chunk-only: ``KnowledgeBase.upsert`` (split, embed, index add, state save), on the
  service's default stores and settings;
- end-to-end: ``KnowledgeService.ingest`` as ``POST /admin/documents`` runs it (the knowledge
  base, then the graph: spaCy extraction, node and triple embeddings, graph persist).

Documents go in batches of ``batch_size`` per call, as an operator's HTTP client sends them.
Raw and chunk-only take turns batch by batch (``measure_kb_ingest``, which the scale section
uses too), so a slower minute of a shared machine weighs on both sides alike.
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
from dataclasses import dataclass
from pathlib import Path

from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import MetadataMode

from api.config import Settings
from api.stores import build_knowledge
from bench.batches import ingest_in_batches
from bench.real_records import IngestRate, RunRate
from bench.stage_clock import Stage, StageClock, Stopwatch
from kg.extract import TripleExtractor
from kg.graph_file import GraphFile
from kg.index import GraphSnapshot
from kg.store import KnowledgeGraph
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.edge import EdgeIndex
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.graph_sync import GraphSync
from rag.knowledge.ingest import ChunkEmbedder, build_pipeline, document_hash, to_llama_document
from rag.knowledge.models import DEFAULT_CHUNKING, ChangeSet, DocumentIn
from rag.knowledge.service import KnowledgeService
from rag.knowledge.state import KBState

GIT_DOC = Path("/usr/share/doc/git/html")
DEFAULT_BATCH = 20
#: The service's defaults (``api.config.Settings``), which ``_open_kb`` builds with.
CHUNK_TOKENS: int = Settings.model_fields["chunk_tokens"].default
CHUNK_OVERLAP: int = Settings.model_fields["chunk_overlap_tokens"].default
EMBEDDING_STAGE = "node/triple embedding"

#: Each stage is the time spent inside that method, or (no class) inside the function the
#: knowledge graph is handed to embed node names and triples with.
STAGES = (
    Stage("split", SentenceSplitter, "__call__"),
    Stage("chunk embedding", ChunkEmbedder, "__call__"),
    Stage("index add", EdgeIndex, "add"),
    Stage("docstore save", KBState, "save"),
    Stage("spacy extraction", TripleExtractor, "extract_documents"),
    Stage(EMBEDDING_STAGE),
    Stage("graph snapshot", GraphSnapshot, "apply"),
    Stage("graph persist", GraphFile, "write"),
)

#: Told of each batch after its upsert (outside the timed part): the batch, what the
#: upsert changed (its chunks' embeddings included) and the knowledge base.
OnBatch = Callable[[Sequence[DocumentIn], ChangeSet, KnowledgeBase], None]


@dataclass(frozen=True)
class KbIngest:
    """Raw embedding and chunk-only ingest of the same documents."""

    raw: RunRate
    chunk_only: RunRate
    embedder_threads: int  # torch's threads, which the embedder sets when it loads


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
    """The service's knowledge base with its default settings, as ``build_knowledge``
    makes it: the vectors in the default embedded index (Qdrant Edge). Until 2026-12-05
    this measured a Qdrant local-mode store, which the service no longer uses."""
    kb = build_knowledge(Settings(data_dir=folder, seed_sample_kb=False), embedder).kb
    kb.open()
    return kb


def _chunk_texts(splitter: NodeParser, documents: Sequence[DocumentIn]) -> list[str]:
    """The texts the knowledge base embeds for ``documents``: split as it splits them."""
    nodes = splitter([to_llama_document(d, document_hash(d, DEFAULT_CHUNKING)) for d in documents])
    return [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]


def _words(documents: Sequence[DocumentIn]) -> int:
    return sum(len(d.text.split()) for d in documents)


def measure_kb_ingest(
    documents: Sequence[DocumentIn],
    folder: Path,
    embedder: Embedder,
    batch_size: int = DEFAULT_BATCH,
    on_batch: OnBatch | None = None,
) -> KbIngest:
    """Per batch: its chunk texts embedded with ``embed_texts`` alone (raw), then the batch
    through ``KnowledgeBase.upsert`` on a knowledge base in ``folder`` (chunk-only)."""
    embedder.warm_up()
    embedder.embed_texts(["Load the model's kernels before timing."])
    splitter = build_pipeline(embedder, CHUNK_TOKENS, CHUNK_OVERLAP).transformations[0]
    assert isinstance(splitter, NodeParser)
    kb = _open_kb(folder, embedder)
    clock = StageClock(STAGES)
    raw, upserts = Stopwatch(), Stopwatch()
    texts = 0
    try:
        for batch in _batches(documents, batch_size):
            batch_texts = _chunk_texts(splitter, batch)
            with raw:
                embedder.embed_texts(batch_texts)
            texts += len(batch_texts)
            with clock.running(), upserts:
                change = kb.upsert(batch)
            if on_batch is not None:
                on_batch(batch, change, kb)
        chunks = kb.count_chunks()
    finally:
        kb.close()
    words = _words(documents)
    return KbIngest(
        raw=RunRate(
            seconds=raw.seconds,
            cpu_seconds=raw.cpu_seconds,
            chunks=texts,
            words=words,
            stages={},
            cpu_stages={},
        ),
        chunk_only=_rate(upserts, chunks, words, clock),
        embedder_threads=embedder.threads,
    )


def _measure_end_to_end(
    documents: Sequence[DocumentIn],
    folder: Path,
    embedder: Embedder,
    batch_size: int,
    parse_beside: bool = False,
) -> tuple[RunRate, KnowledgeGraph]:
    kb = _open_kb(folder, embedder)
    clock = StageClock(STAGES)
    graph = KnowledgeGraph(folder / "kg", clock.timed(EMBEDDING_STAGE, embedder.embed_texts))
    extractor = TripleExtractor()
    extractor.extract("Warm the parser up before timing.")  # model load is start-up cost
    knowledge = KnowledgeService(kb, GraphSync(kb, graph, extractor), parse_beside=parse_beside)
    try:
        with clock.running(), Stopwatch() as watch:
            ingest_in_batches(knowledge, documents, batch_size)
        chunks = kb.count_chunks()
    finally:
        kb.close()
    return _rate(watch, chunks, _words(documents), clock), graph


def measure_ingest(
    documents: Sequence[DocumentIn],
    work_dir: Path,
    log: Callable[[str], None],
    *,
    batch_size: int = DEFAULT_BATCH,
    embedder: Embedder | None = None,
    parse_beside: bool = False,
) -> IngestRate:
    """Measure raw, chunk-only and end-to-end ingest of ``documents`` (stores in
    ``work_dir``); with ``parse_beside``, the end-to-end ingest again with the graph's
    parse beside the chunks' embedding."""
    embedder = embedder or shared_embedder()
    log(
        f"ingest rate: {len(documents)} documents, {_words(documents)} words, "
        f"embedded in {embedder.precision}"
    )
    kb = measure_kb_ingest(documents, _fresh(work_dir / "chunk_only"), embedder, batch_size)
    log(f"raw embedding: {kb.raw.chunks} chunks in {kb.raw.seconds:.1f} s")
    log(f"chunk-only ingest: {kb.chunk_only.seconds:.1f} s")
    end_to_end, graph = _measure_end_to_end(
        documents, _fresh(work_dir / "end_to_end"), embedder, batch_size
    )
    log(f"end-to-end ingest: {end_to_end.seconds:.1f} s")
    beside = None
    if parse_beside:
        folder = _fresh(work_dir / "parse_beside")
        beside, _ = _measure_end_to_end(documents, folder, embedder, batch_size, True)
        log(f"end-to-end ingest, the graph's parse beside the embedding: {beside.seconds:.1f} s")
    return IngestRate(
        documents=len(documents),
        batch_size=batch_size,
        embedder_threads=kb.embedder_threads,
        precision=embedder.precision,
        raw=kb.raw,
        chunk_only=kb.chunk_only,
        end_to_end=end_to_end,
        triples=graph.edge_count,
        nodes=graph.node_count,
        parse_beside=beside,
    )


def table(rate: IngestRate) -> str:
    """The rates and the per-stage seconds, as aligned text."""
    raw = rate.raw
    rows = [
        f"documents {rate.documents}, {raw.words} words, {raw.chunks} chunks; "
        f"batches of {rate.batch_size} per call; embedder threads {rate.embedder_threads}",
        f"{'run':<12}{'s':>8}{'chunks/s':>10}{'words/s':>9}{'of raw':>8}"
        f"{'cpu s':>8}{'chunks/cpu s':>14}{'of raw':>8}",
    ]
    for name, run in (
        ("raw", raw),
        ("chunk-only", rate.chunk_only),
        ("end-to-end", rate.end_to_end),
    ):
        share = run.chunks_per_s / raw.chunks_per_s
        cpu_share = run.chunks_per_cpu_s / raw.chunks_per_cpu_s
        rows.append(
            f"{name:<12}{run.seconds:>8.1f}{run.chunks_per_s:>10.1f}{run.words_per_s:>9.0f}"
            f"{share:>8.0%}{run.cpu_seconds:>8.1f}{run.chunks_per_cpu_s:>14.1f}"
            f"{cpu_share:>8.0%}"
        )
    rows.append(f"graph: {rate.triples} triples, {rate.nodes} nodes")
    runs = (rate.chunk_only, rate.end_to_end)
    rows.append(f"{'stage seconds':<24}{'chunk-only':>11}{'end-to-end':>11}{'(cpu)':>8}")
    for name in dict.fromkeys([*runs[0].stages, *runs[1].stages]):
        rows.append(
            f"{name:<24}{runs[0].stages.get(name, 0.0):>11.2f}"
            f"{runs[1].stages.get(name, 0.0):>11.2f}{runs[1].cpu_stages.get(name, 0.0):>8.2f}"
        )
    return "\n".join(rows)


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
    print(table(rate))


if __name__ == "__main__":
    main()
