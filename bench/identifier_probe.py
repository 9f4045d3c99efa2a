"""Would an identifier-aware signal help retrieval? Exact names against dense's top 50.

A probe after ``bench.lexical_probe`` found general BM25 fusion worse than dense on the
real corpus. Here only the question's identifiers count (``rag.chat.identifiers``:
``--no-ff``, ``core.autocrlf``, ``foreign_keys``, ``git-rm``, backticked spans, ALL_CAPS
words). The real corpus (``bench.real_corpus``) is ingested through the service's own
knowledge base (default chunking, titles embedded) in both shapes of
``bench.chunking_quality`` (``sections`` and Markdown ``pages``). Each question's dense
top 50 chunks are then reordered by:

- ``dense``: as retrieved (what the service shows today);
- ``rerank``: chunks that contain more of the identifiers as exact tokens, in their
  text, title or heading path, move ahead, stably (``rag.chat.identifiers.promote``);
- ``rerank text``: the same on the chunk text alone (what a ``Passage`` carries);
- ``rrf id x1`` / ``rrf id x0.5``: reciprocal rank fusion (k = 60) of dense with the
  identifier-only ranking (the matching chunks, more identifiers first), weighted 1 / 0.5;
- ``define``: a definition-aware rerank (``IdentifierMatcher.points``): a chunk whose
  title or heading path names an identifier, or a line of which starts with it
  (``--abort:: ...``, ``PRAGMA foreign_keys;``, one word allowed before it) scores 2 for
  it, a mere mention 1;
- ``rrf global x0.5``: the identifier-only ranking over every chunk of the corpus (a
  sparse vector restricted to identifiers would find these), fused with dense at 0.5;
- ``-cmd``: the same without hyphenated command names as identifiers (``git
  format-patch``); ``define text -cmd`` is what the retriever does
  (``rag.chat.retriever``, ``identifier_candidates``).

Measured (docs/performance.md): every variant lifts the 40 identifier questions (recall@1
0.175 -> 0.600-0.700 on sections, 0.350 -> 0.750-0.825 on pages); with command names
every variant loses recall@3 on all questions (-0.020 / -0.013); ``define text -cmd``
keeps all 245 ranks and is the best or tied best on every identifier set.

Scored (``bench.retrieval_quality``: recall@1/3/10 and MRR of the gold section among
the distinct sections of the ranking) on the 245 heading questions, on the 12 of them
that name an identifier when command names count (``named``), on the 40 identifier
questions of ``bench.identifier_questions`` and on its whole pools (options and config
keys); and the rank of ``PRAGMA foreign_keys`` among the six pragma documents of
``tests/data/sqlite-pragmas`` (titled, untitled, one Markdown page) for "What does PRAGMA
foreign_keys do?" (first under every variant) and "What does foreign_keys do?" (dense
puts ``foreign_key_list`` first without titles; every identifier variant fixes it).

Run: ``.venv/bin/python -m bench.identifier_probe [--out FILE.json]`` (about 5 minutes
on 2 cores, no vLLM).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.chunking_quality import Corpus, Page, corpus
from bench.harness import ingested
from bench.identifier_questions import (
    PRAGMA_GOLD,
    PRAGMA_QUESTIONS,
    identifier_questions,
    key_pool,
    option_pool,
    pragma_documents,
)
from bench.lexical_probe import FETCH, RRF_K, Moved, fuse
from bench.real_corpus import RealWorkload
from bench.real_records import RealSpec
from bench.record import Record
from bench.retrieval_quality import RANK_DEPTH, GoldQuestion, Quality, dedupe, score
from rag.chat.identifiers import IdentifierMatcher, promote
from rag.chat.query import retrieval_text
from rag.knowledge.base import KnowledgeBase
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.models import DocumentIn

ID_WEIGHTS = (1.0, 0.5)
GLOBAL_WEIGHT = 0.5


@dataclass(frozen=True)
class Chunk:
    id: str
    section: str  # what a hit counts for
    text: str
    label: str  # title and heading path


@dataclass(frozen=True)
class Ask:
    """One question's inputs to every variant."""

    dense: list[str]  # chunk ids, best first
    matcher: IdentifierMatcher  # command names included
    plain: IdentifierMatcher  # without command names (the product's rule)


Variant = Callable[[Ask, dict[str, Chunk]], list[str]]


def _full(chunk: Chunk) -> str:
    return f"{chunk.label}\n{chunk.text}"


def id_ranking(ask: Ask, chunks: dict[str, Chunk], pool: Sequence[str]) -> list[str]:
    """The chunks of ``pool`` that contain an identifier, more identifiers first."""
    counts = {c: ask.matcher.count(_full(chunks[c])) for c in pool}
    return [c for c in sorted(pool, key=lambda c: -counts[c]) if counts[c]]


def variants(all_chunks: Sequence[str]) -> dict[str, Variant]:
    """Each variant, by name; ``-cmd``: command names are not identifiers."""

    def rerank(define: bool, label: bool, commands: bool) -> Variant:
        def ranked(a: Ask, ch: dict[str, Chunk]) -> list[str]:
            matcher = a.matcher if commands else a.plain
            if not define:
                text = _full if label else (lambda c: c.text)
                return promote(a.dense, matcher, lambda c: text(ch[c]), define=False)
            points = {c: matcher.points(ch[c].text, ch[c].label if label else "") for c in a.dense}
            return sorted(a.dense, key=lambda c: -points[c])

        return ranked

    def rrf(weight: float) -> Variant:
        return lambda a, ch: fuse(a.dense, id_ranking(a, ch, a.dense), weight, RRF_K)

    def rrf_global(a: Ask, ch: dict[str, Chunk]) -> list[str]:
        lexical = id_ranking(a, ch, all_chunks)[:FETCH] if a.matcher else []
        return fuse(a.dense, lexical, GLOBAL_WEIGHT, RRF_K)

    return {
        "dense": lambda a, ch: a.dense,
        "rerank": rerank(define=False, label=True, commands=True),
        "rerank text": rerank(define=False, label=False, commands=True),
        **{f"rrf id x{w:g}": rrf(w) for w in ID_WEIGHTS},
        f"rrf global x{GLOBAL_WEIGHT:g}": rrf_global,
        "define": rerank(define=True, label=True, commands=True),
        "rerank -cmd": rerank(define=False, label=False, commands=False),
        "define -cmd": rerank(define=True, label=True, commands=False),
        "define text -cmd": rerank(define=True, label=False, commands=False),
    }


class Ranks(Record):
    """Recall@1/3/10 and MRR of the gold section over ``n`` questions."""

    n: int
    recall_at_1: float
    recall_at_3: float
    recall_at_10: float
    mrr: float

    @classmethod
    def of(cls, quality: Quality) -> Ranks:
        s = quality.summary()
        return cls(
            n=s.n, recall_at_1=s.recall_at_1, recall_at_3=s.recall_at_3,
            recall_at_10=s.recall_at_10, mrr=s.mrr,
        )  # fmt: skip


class VariantResult(Record):
    sets: dict[str, Ranks]  # question set -> ranks
    vs_dense: dict[str, dict[str, Moved]]  # question set -> at_1 / at_3 -> moved


class ShapeResult(Record):
    documents: int
    chunks: int
    ingest_s: float
    dense_ms_p50: float
    rerank_ms_p50: float  # ``promote`` over the 50 candidates, identifiers found included
    variants: dict[str, VariantResult]


class PragmaCase(Record):
    """One shape of the pragma fixture: where the documented pragma ranks, per variant."""

    ranking_dense: list[str]
    gold_rank: dict[str, int | None]  # variant -> 1-based rank among the pragmas


class Pragma(Record):
    question: str
    identifiers: list[str]  # the product's rule
    gold: str
    shapes: dict[str, PragmaCase]  # titled, untitled, page


class ProbeResult(Record):
    """What ``--out`` writes."""

    question_sets: dict[str, int]
    shapes: dict[str, ShapeResult]
    pragma: list[Pragma]


def _chunks(data: Corpus, kb: KnowledgeBase) -> dict[str, Chunk]:
    found = {}
    for doc in data.documents:
        for c in kb.chunks(doc.id):
            label = "\n".join(x for x in (c.title, c.heading_path) if x)
            found[c.chunk_id] = Chunk(
                c.chunk_id, data.section_of(doc.id, c.start, len(c.text)), c.text, label
            )
    return found


def _asks(
    kb: KnowledgeBase, embedder: Embedder, golds: Sequence[GoldQuestion]
) -> tuple[list[Ask], list[float], list[float]]:
    asks, dense_ms, rerank_ms = [], [], []
    for gold in golds:
        text = retrieval_text(gold.question)
        t0 = time.perf_counter()
        hits = kb.retrieve(embedder.embed_query(text), FETCH)
        t1 = time.perf_counter()
        plain = IdentifierMatcher.of(text)
        promote(hits, plain, lambda p: p.text)
        t2 = time.perf_counter()
        dense_ms.append((t1 - t0) * 1000)
        rerank_ms.append((t2 - t1) * 1000)
        asks.append(Ask([p.chunk_id for p in hits], IdentifierMatcher.of(text, True), plain))
    return asks, dense_ms, rerank_ms


def measure_shape(
    data: Corpus,
    sets: dict[str, list[GoldQuestion]],
    embedder: Embedder,
    log: Callable[[str], None],
) -> ShapeResult:
    batch = 50 if data.shape == "sections" else 4
    with ingested(data.documents, batch, embedder) as done:
        log(f"{data.shape}: ingested in {done.seconds:.1f} s")
        chunks = _chunks(data, done.kb)
        every = list(chunks)
        asked = {name: _asks(done.kb, embedder, golds) for name, golds in sets.items()}
    results: dict[str, VariantResult] = {}
    baseline: dict[str, Quality] = {}
    for name, variant in variants(every).items():
        per_set, moved = {}, {}
        for set_name, golds in sets.items():
            ranks = [
                dedupe(chunks[c].section for c in variant(a, chunks))[:RANK_DEPTH]
                for a in asked[set_name][0]
            ]
            quality = score(golds, ranks, [[] for _ in golds])
            baseline.setdefault(set_name, quality)
            per_set[set_name] = Ranks.of(quality)
            moved[set_name] = {f"at_{k}": Moved.of(quality, baseline[set_name], k) for k in (1, 3)}
        results[name] = VariantResult(sets=per_set, vs_dense=moved)
    dense_ms = [ms for a in asked.values() for ms in a[1]]
    rerank_ms = [ms for a in asked.values() for ms in a[2]]
    return ShapeResult(
        documents=len(data.documents),
        chunks=len(chunks),
        ingest_s=round(done.seconds, 1),
        dense_ms_p50=round(statistics.median(dense_ms), 2),
        rerank_ms_p50=round(statistics.median(rerank_ms), 3),
        variants=results,
    )


def pragma_shapes() -> dict[str, Corpus]:
    """The six pragma documents as given (first line as title), without titles (the first
    line dropped too), and as one Markdown page (``## PRAGMA name`` per pragma)."""
    titled = pragma_documents()
    untitled = [DocumentIn(id=d.id, text=d.text.split("\n", 1)[1].strip()) for d in titled]
    text, spans = "# Pragma statements\n\n", []
    for d in titled:
        start = len(text)
        text += f"## {d.text.strip()}\n\n"
        spans.append((d.id, start, len(text)))
    page = Page("sqlite/pragma.md", "Pragma statements", "pragma.md", text, tuple(spans))
    return {
        "titled": Corpus("sections", titled, [], {}),
        "untitled": Corpus("sections", untitled, [], {}),
        "page": Corpus("pages", [page.document()], [], {page.id: page}),
    }


def pragma_case(embedder: Embedder) -> list[Pragma]:
    """Where ``PRAGMA foreign_keys`` ranks among the six pragmas, per question, shape and
    variant."""
    golds = [GoldQuestion(q, PRAGMA_GOLD, "") for q in PRAGMA_QUESTIONS]
    shapes: list[dict[str, PragmaCase]] = [{} for _ in golds]
    for name, data in pragma_shapes().items():
        with ingested(data.documents, 50, embedder) as done:
            chunks = _chunks(data, done.kb)
            asks, _, _ = _asks(done.kb, embedder, golds)
        for ask, cases in zip(asks, shapes, strict=True):
            ranked = {
                n: dedupe(chunks[c].section for c in v(ask, chunks))
                for n, v in variants(list(chunks)).items()
            }
            cases[name] = PragmaCase(
                ranking_dense=ranked["dense"],
                gold_rank={n: r.index(PRAGMA_GOLD) + 1 if PRAGMA_GOLD in r else None
                           for n, r in ranked.items()},
            )  # fmt: skip
    return [
        Pragma(
            question=g.question,
            identifiers=list(IdentifierMatcher.of(g.question).names),
            gold=PRAGMA_GOLD,
            shapes=cases,
        )
        for g, cases in zip(golds, shapes, strict=True)
    ]


def question_sets(workload: RealWorkload) -> dict[str, list[GoldQuestion]]:
    golds = workload.gold_questions()
    return {
        "all": golds,
        "named": [g for g in golds if IdentifierMatcher.of(retrieval_text(g.question), True)],
        "identifier": identifier_questions(workload.towns),
        "options pool": option_pool(workload.towns),
        "keys pool": key_pool(workload.towns),
    }


def run(
    shapes: Sequence[str] = ("sections", "pages"), log: Callable[[str], None] = print
) -> ProbeResult:
    workload = RealWorkload(RealSpec.full())
    embedder = shared_embedder()
    embedder.warm_up()
    sets = question_sets(workload)
    pragma = pragma_case(embedder)
    for case in pragma:
        log(f"{case.question}: { {k: c.gold_rank for k, c in case.shapes.items()} }")
    measured = {
        shape: measure_shape(corpus(shape, workload), sets, embedder, log) for shape in shapes
    }
    return ProbeResult(
        question_sets={k: len(v) for k, v in sets.items()}, shapes=measured, pragma=pragma
    )


def print_table(result: ProbeResult) -> None:
    print(f"question sets: {result.question_sets}")
    for pragma in result.pragma:
        for name, case in pragma.shapes.items():
            print(f"{pragma.question} {name}: dense {case.ranking_dense}; gold at {case.gold_rank}")
    head = f"{'shape':<9} {'variant':<17} {'set':<13}"
    print(f"{head} {'R@1':>6} {'R@3':>6} {'R@10':>6} {'MRR':>6} {'+/-@3':>7}")
    for shape, part in result.shapes.items():
        print(
            f"{shape}: {part.documents} documents, {part.chunks} chunks, ingest {part.ingest_s} s, "
            f"dense p50 {part.dense_ms_p50} ms, rerank p50 {part.rerank_ms_p50} ms"
        )
        for name, v in part.variants.items():
            for set_name, r in v.sets.items():
                m = v.vs_dense[set_name]["at_3"]
                moved = f"+{len(m.fixed)}/-{len(m.broken)}"
                print(
                    f"{shape:<9} {name:<17} {set_name:<13} {r.recall_at_1:>6.3f} "
                    f"{r.recall_at_3:>6.3f} {r.recall_at_10:>6.3f} {r.mrr:>6.3f} {moved:>7}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=str, help="also write the result here (JSON)")
    parser.add_argument(
        "--shape", choices=("sections", "pages"), action="append", help="only this shape"
    )
    args = parser.parse_args()
    result = run(args.shape or ("sections", "pages"))
    print_table(result)
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result.to_json(), out, indent=2)


if __name__ == "__main__":
    main()
