"""Would a lexical signal help retrieval? Dense, BM25 and their fusion on the real corpus.

A probe ahead of hybrid retrieval (issue 15), not the product's path: the real corpus
(Git's documentation, 300 sections, 245 heading questions, ``bench.real_corpus``) is
ingested through the service's own knowledge base (chunking, titles embedded), then each
question is answered three ways over the same chunks:

- dense: the knowledge base's cosine top 50 (what the service retrieves today);
- BM25 (k1 1.2, b 0.75) over each chunk's text with its document title, with a plain
  tokenizer that keeps command names and flags whole (``git-rm``, ``--no-edit``);
- fusion: reciprocal rank fusion (k = 60) of the two top 50s, BM25 weighted 1, 0.5 and
  0.25.

Reported: recall@1/3/10 and MRR of the gold section (``bench.retrieval_quality``), for
all questions and for the exact-term slice (questions naming a git command), and which
questions fusion fixed and broke against dense. The product would compute BM25 in Qdrant
(sparse vectors with the IDF modifier); this probe's in-memory BM25 answers only whether
the signal is worth that.

Run: ``.venv/bin/python -m bench.lexical_probe [--out FILE.json]``
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.harness import ingested
from bench.real_corpus import RealWorkload
from bench.real_records import QualitySummary, RealSpec
from bench.record import Record
from bench.retrieval_quality import RANK_DEPTH, GoldQuestion, Quality, dedupe, score
from rag.chat.query import retrieval_text
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.models import DocumentIn

FETCH = 50
RRF_K = 60
_TOKEN = re.compile(r"[a-z0-9][a-z0-9_-]*")
#: A question naming a git command ("What does git rm do?"): an exact term.
COMMAND = re.compile(r"\bgit[ -][a-z][a-z-]+")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class BM25:
    """Okapi BM25 over a fixed list of texts."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.docs = [Counter(tokens(t)) for t in texts]
        self.lengths = np.array([sum(d.values()) for d in self.docs], dtype=np.float64)
        self.avg = float(self.lengths.mean()) if len(self.docs) else 0.0
        df: Counter[str] = Counter(term for d in self.docs for term in d)
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.k1, self.b = k1, b

    def top(self, query: str, k: int) -> list[int]:
        terms = [t for t in set(tokens(query)) if t in self.idf]
        scores = np.zeros(len(self.docs))
        norm = self.k1 * (1 - self.b + self.b * self.lengths / self.avg)
        for term in terms:
            tf = np.array([d.get(term, 0) for d in self.docs], dtype=np.float64)
            scores += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order[:k] if scores[i] > 0]


#: BM25's weight in the fusion: equal, then lighter (dense is the stronger signal here).
LEXICAL_WEIGHTS = (1.0, 0.5, 0.25)


def fuse(dense: Sequence[str], lexical: Sequence[str], weight: float, k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion of two chunk-id rankings, the lexical one weighted."""
    fused: dict[str, float] = {}
    for ranking, w in ((dense, 1.0), (lexical, weight)):
        for rank, chunk in enumerate(ranking, 1):
            fused[chunk] = fused.get(chunk, 0.0) + w / (k + rank)
    return [c for c, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))]


class SliceQuality(Record):
    """Quality over all questions and over the exact-term slice (naming a git command)."""

    all: QualitySummary
    exact_terms: QualitySummary

    def pieces(self) -> dict[str, QualitySummary]:
        return {"all": self.all, "exact_terms": self.exact_terms}


def sliced(
    golds: Sequence[GoldQuestion],
    whole: Quality,
    ranks: Sequence[list[str]],
    prompts: Sequence[list[str]] | None = None,
) -> SliceQuality:
    """``whole``'s summary, and the exact-term slice's scored from the same rankings (and
    prompts, where the run has them)."""
    exact = [i for i, g in enumerate(golds) if COMMAND.search(g.question.lower())]
    shown = prompts if prompts is not None else [[] for _ in golds]
    part = score([golds[i] for i in exact], [ranks[i] for i in exact], [shown[i] for i in exact])
    return SliceQuality(all=whole.summary(), exact_terms=part.summary())


class Moved(Record):
    """The questions a run found within the top k and a baseline did not, and the reverse."""

    fixed: list[str]
    broken: list[str]

    @classmethod
    def of(cls, ours: Quality, baseline: Quality, k: int) -> Moved:
        fixed, broken = ours.fixed_and_broken(baseline, k=k)
        return cls(fixed=fixed, broken=broken)


class ProbeResult(Record):
    """What ``--out`` writes."""

    chunks: int
    questions: int
    exact_term_questions: int
    ingest_s: float
    dense_ms_p50: float
    bm25_ms_p50: float
    modes: dict[str, SliceQuality]
    fusion_vs_dense_at_1: dict[str, Moved]


def run() -> ProbeResult:
    workload = RealWorkload(RealSpec.full())
    golds = workload.gold_questions()
    documents = [DocumentIn.model_validate(d) for d in workload.documents()]
    embedder = shared_embedder()
    embedder.warm_up()
    with ingested(documents, 50, embedder) as done:
        kb = done.kb
        chunks = [(d.id, c) for d in documents for c in kb.chunks(d.id)]
        titles = {d.id: str(d.metadata.get("title", "")) for d in documents}
        chunk_ids = [c.chunk_id for _, c in chunks]
        doc_of = {c.chunk_id: doc for doc, c in chunks}
        bm25 = BM25([f"{titles[doc]}\n{c.text}" for doc, c in chunks])
        fusions = {f"rrf bm25x{w:g}": w for w in LEXICAL_WEIGHTS}
        modes: dict[str, list[list[str]]] = {"dense": [], "bm25": [], **{m: [] for m in fusions}}
        dense_ms, bm25_ms = [], []
        for gold in golds:
            text = retrieval_text(gold.question)
            t0 = time.perf_counter()
            dense = [p.chunk_id for p in kb.retrieve(embedder.embed_query(text), FETCH)]
            t1 = time.perf_counter()
            lexical = [chunk_ids[i] for i in bm25.top(text, FETCH)]
            t2 = time.perf_counter()
            dense_ms.append((t1 - t0) * 1000)
            bm25_ms.append((t2 - t1) * 1000)
            ranked = {"dense": dense, "bm25": lexical}
            ranked.update({m: fuse(dense, lexical, w) for m, w in fusions.items()})
            for mode, ranking in ranked.items():
                modes[mode].append(dedupe(doc_of[c] for c in ranking)[:RANK_DEPTH])
    qualities = {mode: score(golds, ranks, [[] for _ in golds]) for mode, ranks in modes.items()}
    return ProbeResult(
        chunks=len(chunks),
        questions=len(golds),
        exact_term_questions=sum(1 for g in golds if COMMAND.search(g.question.lower())),
        ingest_s=round(done.seconds, 1),
        dense_ms_p50=round(float(np.median(dense_ms)), 2),
        bm25_ms_p50=round(float(np.median(bm25_ms)), 2),
        modes={mode: sliced(golds, qualities[mode], modes[mode]) for mode in modes},
        fusion_vs_dense_at_1={m: Moved.of(qualities[m], qualities["dense"], 1) for m in fusions},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the result here (JSON)")
    args = parser.parse_args()
    result = run()
    print(
        f"{result.questions} questions ({result.exact_term_questions} naming a git "
        f"command), {result.chunks} chunks; ingest {result.ingest_s} s; "
        f"p50 dense {result.dense_ms_p50} ms, bm25 {result.bm25_ms_p50} ms"
    )
    print(f"{'mode':<14} {'slice':<12} {'R@1':>6} {'R@3':>6} {'R@10':>6} {'MRR':>6}")
    for mode, parts in result.modes.items():
        for part, s in parts.pieces().items():
            print(
                f"{mode:<14} {part:<12} {s.recall_at_1:>6.3f} {s.recall_at_3:>6.3f} "
                f"{s.recall_at_10:>6.3f} {s.mrr:>6.3f}"
            )
    for mode, moved in result.fusion_vs_dense_at_1.items():
        fixed, broken = len(moved.fixed), len(moved.broken)
        print(f"{mode} against dense at rank 1: fixed {fixed}, broke {broken}")
    if args.out:
        args.out.write_text(json.dumps(result.to_json(), indent=2))


if __name__ == "__main__":
    main()
