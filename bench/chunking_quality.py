"""Structure-aware chunks against the sentence splitter, on two shapes of the real corpus.

The real corpus (``bench.real_corpus``: Git's documentation, 300 sections, 245 heading
questions whose gold answer is a section) is ingested in two shapes:

- ``sections``: one plain-text document per section, its heading path as the first
  line (what the other benchmarks use); plain text is cut by the sentence splitter
  under either strategy, so this shape checks that nothing changes there;
- ``pages``: the same sections put back together as one Markdown file per source
  page (46 pages, ids ending in ``.md``: ``#`` headings down the heading path, code
  fenced), as an operator would upload them. A hit counts for the section its chunk's
  middle lies in.

Each shape goes through the service's own knowledge base with ``WARMRAG_CHUNKING`` set
to ``sentence`` and to ``structure`` (everything else the default: 200-word-piece
chunks, titles embedded). Reported per run: recall@1/3/10 and MRR of the gold section
among the distinct sections of the top 50 chunks (as ``bench.lexical_probe`` ranks;
``bench.retrieval_quality`` scores them) for all questions and for the exact-term slice
(questions naming a git command), the share whose gold paragraph reaches a chat's
prompt (top 3, small-to-big windows on), chunks, ingest time and throughput, the
retrieval p50 (embedding the question and fetching those 50 included), and the
questions ``structure`` fixed and broke at rank 1 and within the top 3. On ``pages``, BM25 fusion
(``bench.lexical_probe``) is scored again over each run's chunks: the titles no longer
carry each section's exact terms there, which is where a lexical signal could help.

Run: ``.venv/bin/python -m bench.chunking_quality [--out FILE.json]`` (about 12 minutes
on 2 cores, no vLLM).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from pydantic import ConfigDict, Field

from bench.harness import ingested
from bench.lexical_probe import BM25, FETCH, Moved, SliceQuality, fuse, sliced
from bench.real_corpus import GitSection, RealWorkload
from bench.real_records import RealSpec
from bench.record import Record
from bench.retrieval_quality import RANK_DEPTH, GoldQuestion, Quality, dedupe, score
from rag.chat.query import retrieval_text
from rag.chat.retriever import Retriever
from rag.chat.windows import PassageWindows
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.models import ChunkingStrategy, DocumentIn

SHAPES = ("sections", "pages")
STRATEGIES = (ChunkingStrategy.SENTENCE, ChunkingStrategy.STRUCTURE)
PROMPT_K = 3
FUSION_WEIGHT = 0.25  # the lightest weight the lexical probe tried, its best recall@3


@dataclass(frozen=True)
class Page:
    """One source page as Markdown, and where each of its sections lies in the text."""

    id: str
    title: str
    source: str
    text: str
    spans: tuple[tuple[str, int, int], ...]  # (section id, start, end)

    def document(self) -> DocumentIn:
        return DocumentIn(
            id=self.id, text=self.text, metadata={"title": self.title, "source": self.source}
        )

    def section_at(self, offset: int) -> str:
        for section, start, end in self.spans:
            if start <= offset < end:
                return section
        return f"{self.id}#preamble"


def render_page(sections: Sequence[GitSection]) -> Page:
    """Sections of one source, in order, under Markdown headings: the page title as
    ``#``, then each heading of a section's path not already open (a chapter whose own
    text was too short to keep still gets its heading). A section's span starts at its
    own heading and runs to the next section's first heading."""
    title = sections[0].path[0]
    text = f"# {title}\n\n"
    spans: list[tuple[str, int, int]] = []
    open_path: tuple[str, ...] = (title,)
    for section in sections:
        shared = 0
        while shared < min(len(open_path), len(section.path) - 1) and (
            open_path[shared] == section.path[shared]
        ):
            shared += 1
        opened = len(text)
        for depth in range(shared, len(section.path) - 1):
            text += f"{'#' * min(depth + 1, 6)} {section.path[depth]}\n\n"
        start = len(text)
        level = min(len(section.path), 6)
        text += f"{'#' * level} {section.path[-1]}\n\n{section.markdown}\n\n"
        if spans:
            previous = spans[-1]
            spans[-1] = (previous[0], previous[1], opened)
        spans.append((section.id, start, len(text)))
        open_path = section.path
    stem = sections[0].source.removesuffix(".txt")
    return Page(f"git-doc/{stem}.md", title, sections[0].source, text.rstrip() + "\n", tuple(spans))


def pages_of(sections: Sequence[GitSection]) -> list[Page]:
    return [render_page(list(group)) for _, group in groupby(sections, key=lambda s: s.source)]


@dataclass
class Corpus:
    """Documents to ingest, and how a retrieved chunk maps to the section it answers."""

    shape: str
    documents: list[DocumentIn]
    golds: list[GoldQuestion]
    pages: dict[str, Page]

    def section_of(self, doc_id: str, start: int | None, length: int) -> str:
        page = self.pages.get(doc_id)
        if page is None:
            return doc_id  # the sections shape: a document is a section
        return page.section_at((start or 0) + length // 2)


def corpus(shape: str, workload: RealWorkload) -> Corpus:
    golds = workload.gold_questions()
    if shape == "sections":
        docs = [DocumentIn.model_validate(d) for d in workload.documents()]
        return Corpus(shape, docs, golds, {})
    pages = pages_of(workload.towns)
    return Corpus(shape, [p.document() for p in pages], golds, {p.id: p for p in pages})


class ChunkingRun(Record):
    """One shape under one chunking strategy."""

    model_config = ConfigDict(serialize_by_alias=True)

    chunks: int
    retrieval_ms_p50: float
    quality: SliceQuality
    fusion: SliceQuality | None = Field(None, serialization_alias="fusion_bm25x0.25")
    ingest_s: float
    chunks_per_s: float


class ShapeResult(Record):
    documents: int
    runs: dict[str, ChunkingRun]
    structure_vs_sentence: dict[str, Moved]
    fusion_vs_dense: dict[str, dict[str, Moved]] | None = None  # the pages shape's


class ChunkingResult(Record):
    """What ``--out`` writes."""

    questions: int
    shapes: dict[str, ShapeResult]


@dataclass(frozen=True)
class Scored:
    """A run with the per-question qualities the comparisons between runs need."""

    run: ChunkingRun
    quality: Quality
    fusion: Quality | None


def run_one(
    data: Corpus, strategy: ChunkingStrategy, embedder: Embedder, log: Callable[[str], None]
) -> Scored:
    batch = 50 if data.shape == "sections" else 4
    with ingested(data.documents, batch, embedder, strategy) as done:
        log(f"{data.shape}/{strategy.value}: ingested in {done.seconds:.1f} s")
        return _measure(data, done.kb, embedder, done.settings.passage_window_tokens, done.seconds)


def _measure(
    data: Corpus, kb: KnowledgeBase, embedder: Embedder, window_tokens: int, ingest_s: float
) -> Scored:
    chunks = {d.id: kb.chunks(d.id) for d in data.documents}
    where = {
        c.chunk_id: data.section_of(doc, c.start, len(c.text))
        for doc, doc_chunks in chunks.items()
        for c in doc_chunks
    }
    flat = [(doc, c) for doc, doc_chunks in chunks.items() for c in doc_chunks]
    titles = {d.id: str(d.metadata.get("title", "")) for d in data.documents}
    bm25 = BM25([f"{titles[doc]}\n{c.text}" for doc, c in flat]) if data.pages else None
    windows = PassageWindows(kb, embedder.count_tokens, window_tokens)
    chat = Retriever(kb, None, 0, windows)
    dense_rank, fused_rank, prompts, ms = [], [], [], []
    for gold in data.golds:
        text = retrieval_text(gold.question)
        t0 = time.perf_counter()
        hits = kb.retrieve(embedder.embed_query(text), FETCH)
        ms.append((time.perf_counter() - t0) * 1000)
        dense = [p.chunk_id for p in hits]
        dense_rank.append(dedupe(where[c] for c in dense)[:RANK_DEPTH])
        if bm25 is not None:
            lexical = [flat[i][1].chunk_id for i in bm25.top(text, FETCH)]
            fused = fuse(dense, lexical, FUSION_WEIGHT)
            fused_rank.append(dedupe(where[c] for c in fused)[:RANK_DEPTH])
        shown = chat.retrieve(gold.question, top_k=PROMPT_K).passages
        prompts.append([p.window or p.text for p in shown])
    quality = score(data.golds, dense_rank, prompts)
    fusion = score(data.golds, fused_rank, prompts) if bm25 is not None else None
    run = ChunkingRun(
        chunks=len(flat),
        retrieval_ms_p50=round(statistics.median(ms), 2),
        quality=sliced(data.golds, quality, dense_rank, prompts),
        ingest_s=round(ingest_s, 1),
        chunks_per_s=round(len(flat) / ingest_s, 1),
    )
    if fusion is not None:
        run = run.model_copy(update={"fusion": sliced(data.golds, fusion, fused_rank, prompts)})
    return Scored(run, quality, fusion)


def moved(ours: Quality, baseline: Quality) -> dict[str, Moved]:
    """The questions ``ours`` fixed and broke against ``baseline``, within the top 1 and 3."""
    return {f"at_{k}": Moved.of(ours, baseline, k) for k in (1, 3)}


def run(shapes: Sequence[str] = SHAPES, log: Callable[[str], None] = print) -> ChunkingResult:
    workload = RealWorkload(RealSpec.full())
    embedder = shared_embedder()
    embedder.warm_up()
    results: dict[str, ShapeResult] = {}
    for shape in shapes:
        data = corpus(shape, workload)
        runs = {s.value: run_one(data, s, embedder, log) for s in STRATEGIES}
        sentence, structure = runs["sentence"], runs["structure"]
        result = ShapeResult(
            documents=len(data.documents),
            runs={k: r.run for k, r in runs.items()},
            structure_vs_sentence=moved(structure.quality, sentence.quality),
        )
        fusions = {k: moved(r.fusion, r.quality) for k, r in runs.items() if r.fusion is not None}
        if fusions:
            result = result.model_copy(update={"fusion_vs_dense": fusions})
        results[shape] = result
    return ChunkingResult(questions=len(workload.gold_questions()), shapes=results)


def print_table(result: ChunkingResult) -> None:
    print(f"{result.questions} questions")
    head = f"{'shape':<9} {'chunking':<10} {'retrieval':<9} {'slice':<11}"
    print(f"{head} {'R@1':>6} {'R@3':>6} {'R@10':>6} {'MRR':>6} {'prompt':>6}")
    for shape, part in result.shapes.items():
        for name, r in part.runs.items():
            print(
                f"{shape:<9} {name:<10} chunks {r.chunks}, ingest {r.ingest_s} s "
                f"({r.chunks_per_s} chunks/s), retrieval p50 {r.retrieval_ms_p50} ms"
            )
            for label, slices in (("dense", r.quality), ("rrf bm25", r.fusion)):
                for piece, q in (slices.pieces() if slices else {}).items():
                    print(
                        f"{shape:<9} {name:<10} {label:<9} {piece:<11} {q.recall_at_1:>6.3f} "
                        f"{q.recall_at_3:>6.3f} {q.recall_at_10:>6.3f} {q.mrr:>6.3f} "
                        f"{q.gold_text_in_prompt:>6.3f}"
                    )
        for k, m in part.structure_vs_sentence.items():
            print(
                f"{shape}: structure against sentence {k}: fixed {len(m.fixed)}, "
                f"broke {len(m.broken)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the result here (JSON)")
    parser.add_argument("--shape", choices=SHAPES, action="append", help="only this shape")
    args = parser.parse_args()
    result = run(args.shape or SHAPES)
    print_table(result)
    if args.out:
        args.out.write_text(json.dumps(result.to_json(), indent=2))


if __name__ == "__main__":
    main()
