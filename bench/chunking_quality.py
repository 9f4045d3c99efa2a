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
from typing import Any

import anyio

from api.config import Settings
from api.stores import build_knowledge
from bench.harness import bench_dir
from bench.lexical_probe import BM25, COMMAND, FETCH, fuse
from bench.real_corpus import GitSection, RealSpec, RealWorkload
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


def run_one(
    data: Corpus, strategy: ChunkingStrategy, embedder: Embedder, log: Callable[[str], None]
) -> dict[str, Any]:
    with bench_dir() as folder:
        settings = Settings(
            data_dir=Path(folder), kg_extraction=False, seed_sample_kb=False, chunking=strategy
        )
        knowledge = build_knowledge(settings, embedder)
        knowledge.open()
        started = time.perf_counter()
        batch = 50 if data.shape == "sections" else 4
        for i in range(0, len(data.documents), batch):
            anyio.run(knowledge.ingest, data.documents[i : i + batch])
        ingest_s = time.perf_counter() - started
        kb = knowledge.kb
        log(f"{data.shape}/{strategy.value}: ingested in {ingest_s:.1f} s")
        result = _measure(data, kb, embedder, settings)
        result["ingest_s"] = round(ingest_s, 1)
        result["chunks_per_s"] = round(result["chunks"] / ingest_s, 1)
        knowledge.close()
    return result


def _measure(data: Corpus, kb: KnowledgeBase, embedder: Embedder, s: Settings) -> dict[str, Any]:
    chunks = {d.id: kb.chunks(d.id) for d in data.documents}
    where = {
        c.chunk_id: data.section_of(doc, c.start, len(c.text))
        for doc, doc_chunks in chunks.items()
        for c in doc_chunks
    }
    flat = [(doc, c) for doc, doc_chunks in chunks.items() for c in doc_chunks]
    titles = {d.id: str(d.metadata.get("title", "")) for d in data.documents}
    bm25 = BM25([f"{titles[doc]}\n{c.text}" for doc, c in flat]) if data.pages else None
    windows = PassageWindows(kb, embedder.count_tokens, s.passage_window_tokens)
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
    result: dict[str, Any] = {
        "chunks": len(flat),
        "retrieval_ms_p50": round(statistics.median(ms), 2),
        "quality": _slices(data.golds, quality, dense_rank, prompts),
        "_quality": quality,
    }
    if bm25 is not None:
        fusion = score(data.golds, fused_rank, prompts)
        result["fusion_bm25x0.25"] = _slices(data.golds, fusion, fused_rank, prompts)
        result["_fusion"] = fusion
    return result


def _slices(
    golds: Sequence[GoldQuestion], whole: Quality, ranks: list[list[str]], prompts: list[list[str]]
) -> dict[str, Any]:
    exact = [i for i, g in enumerate(golds) if COMMAND.search(g.question.lower())]
    sliced = score(
        [golds[i] for i in exact], [ranks[i] for i in exact], [prompts[i] for i in exact]
    )
    return {"all": whole.summary(), "exact_terms": sliced.summary()}


def _public(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if not k.startswith("_")}


def moved(ours: Quality, baseline: Quality) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in (1, 3):
        fixed, broken = ours.fixed_and_broken(baseline, k=k)
        out[f"at_{k}"] = {"fixed": fixed, "broken": broken}
    return out


def run(shapes: Sequence[str] = SHAPES, log: Callable[[str], None] = print) -> dict[str, Any]:
    workload = RealWorkload(RealSpec.full())
    embedder = shared_embedder()
    embedder.warm_up()
    result: dict[str, Any] = {"questions": len(workload.gold_questions()), "shapes": {}}
    for shape in shapes:
        data = corpus(shape, workload)
        runs = {s.value: run_one(data, s, embedder, log) for s in STRATEGIES}
        sentence, structure = runs["sentence"], runs["structure"]
        shape_result: dict[str, Any] = {
            "documents": len(data.documents),
            "runs": {
                k: {f: v for f, v in r.items() if not f.startswith("_")} for k, r in runs.items()
            },
            "structure_vs_sentence": moved(structure["_quality"], sentence["_quality"]),
        }
        if "_fusion" in structure:
            shape_result["fusion_vs_dense"] = {
                k: moved(r["_fusion"], r["_quality"]) for k, r in runs.items()
            }
        result["shapes"][shape] = shape_result
    return result


def print_table(result: dict[str, Any]) -> None:
    print(f"{result['questions']} questions")
    head = f"{'shape':<9} {'chunking':<10} {'retrieval':<9} {'slice':<11}"
    print(f"{head} {'R@1':>6} {'R@3':>6} {'R@10':>6} {'MRR':>6} {'prompt':>6}")
    for shape, part in result["shapes"].items():
        for name, r in part["runs"].items():
            print(
                f"{shape:<9} {name:<10} chunks {r['chunks']}, ingest {r['ingest_s']} s "
                f"({r['chunks_per_s']} chunks/s), retrieval p50 {r['retrieval_ms_p50']} ms"
            )
            for mode in ("quality", "fusion_bm25x0.25"):
                if mode not in r:
                    continue
                for piece, q in r[mode].items():
                    label = "dense" if mode == "quality" else "rrf bm25"
                    print(
                        f"{shape:<9} {name:<10} {label:<9} {piece:<11} {q['recall_at_1']:>6.3f} "
                        f"{q['recall_at_3']:>6.3f} {q['recall_at_10']:>6.3f} {q['mrr']:>6.3f} "
                        f"{q['gold_text_in_prompt']:>6.3f}"
                    )
        for k, m in part["structure_vs_sentence"].items():
            print(
                f"{shape}: structure against sentence {k}: fixed {len(m['fixed'])}, "
                f"broke {len(m['broken'])}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the result here (JSON)")
    parser.add_argument("--shape", choices=SHAPES, action="append", help="only this shape")
    args = parser.parse_args()
    result = run(args.shape or SHAPES)
    print_table(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
