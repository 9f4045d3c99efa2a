"""The real-corpus section: Git's documentation (the Debian package ``git-doc``), one
document per section, with realistic contexts (~1.3k prompt tokens after small-to-big).

In order, on one vLLM with prefix caching:

1. ingest rate, in-process before the vLLM starts (``bench.ingest_rate``): raw
   embedding throughput of the corpus's chunks, chunk-only ingest, and the whole
   ingest with the knowledge graph;
2. the floor (the questions alone, straight to vLLM) and the corpus ingested over HTTP
   into a template data folder;
3. retrieval quality (``bench.retrieval_quality``): recall@1/3/10 and MRR of the gold
   section among warmrag's passages, next to plain llama-index defaults (512/50
   chunks), and the share of questions whose gold text reaches the prompt with and
   without small-to-big windows;
4. strategies 1 (plain prefix caching) and 4 (warmrag) side by side: steady, restart
   and change (``bench.scenarios``);
5. variants asked cold then warm (each question once on an emptied cache, then again):
   the default, small-to-big off, block alignment off; with the TTFT breakdown of the
   default's misses and hits (``bench.breakdown``) and whether alignment changed answers.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench.breakdown import measure as measure_breakdown
from bench.breakdown import summarize_rows
from bench.harness import ask_all, reset_prefix_cache, service
from bench.ingest_rate import measure_ingest
from bench.real_corpus import RealWorkload, describe
from bench.real_records import (
    AnswerComparison,
    AnswerExample,
    IngestRate,
    QualityReport,
    QuestionRank,
    RealResult,
    RealSpec,
    VariantResult,
    VariantRows,
)
from bench.retrieval_quality import (
    Quality,
    WarmragEmbedding,
    evaluate_llamaindex_defaults,
    evaluate_service,
)
from bench.scenario_records import ScenarioConfig
from bench.scenarios import build_template, measure_floor, run_strategy
from bench.strategies import OURS, PLAIN, Overrides
from rag.chat.query import normalize_query
from rag.chat.retriever import Retriever
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.models import DocumentIn, EmbeddingPrecision

Log = Callable[[str], None]

#: The change scenario on this corpus: fewer, larger windows than the towns' (each
#: cold request here costs seconds).
FULL_CONFIG = ScenarioConfig(
    change_sizes=(1, 10), change_window_s=40.0, change_requests=20, floor_questions=30
)
QUICK_CONFIG = ScenarioConfig(
    change_sizes=(1, 5), change_window_s=10.0, change_requests=6, floor_questions=10
)
VARIANTS: dict[str, Overrides] = {
    "default": Overrides(),
    "windows_off": Overrides(passage_window_tokens=0),
    "alignment_off": Overrides(prefix_block_align=False),
}
ANSWER_TOKENS = 48  # long enough to compare answers with and without alignment


def run_real(vllm_url: str, work: Path, quick: bool, log: Log, result: RealResult) -> RealResult:
    """The whole section (the vLLM at ``vllm_url`` is shared with nothing else), filled
    into ``result`` step by step, so a failure keeps what was measured before it."""
    spec = RealSpec.quick() if quick else RealSpec.full()
    config = QUICK_CONFIG if quick else FULL_CONFIG
    workload = RealWorkload(spec)
    result.corpus, result.spec, result.strategies = describe(workload), spec, {}
    log(f"real corpus: {result.corpus.to_json()}")
    result.floor = measure_floor(vllm_url, workload, config)
    template = work / "real-template"
    result.corpus_ingest = build_template(vllm_url, template, workload, log)
    log("real corpus: retrieval quality")
    result.quality = quality(vllm_url, template, workload, work)
    for strategy in (PLAIN, OURS):
        log(f"real corpus: strategy {strategy.label}")
        result.strategies[strategy.slug] = run_strategy(
            strategy, vllm_url, work / "real", workload, config, log, template=template
        )
    questions = sample_questions(workload, 8 if quick else 20)
    result.variants = {}
    for name, overrides in VARIANTS.items():
        log(f"real corpus: {name}, cold then warm")
        result.variants[name] = cold_then_warm(
            vllm_url, template, work / f"variant-{name}", questions, overrides
        )
    result.answers = compare_answers(vllm_url, template, work, questions[:10])
    return result


def run_ingest_rate(quick: bool, work: Path, log: Log) -> tuple[IngestRate, IngestRate]:
    """Step 1, before any vLLM starts (the embedding model has both cores): the default
    embedder's ingest (int8 on an x86 CPU with AVX2, else float32), also with the graph's
    parse beside the embedding, then the other of the two on the same sections, measured
    against it."""
    workload = RealWorkload(RealSpec.quick() if quick else RealSpec.full())
    log(f"real corpus: ingest rate over {len(workload.towns)} sections")
    documents = [DocumentIn.model_validate(d, strict=False) for d in workload.documents()]
    default = measure_ingest(documents, work / "ingest-rate", log, parse_beside=True)
    other = EmbeddingPrecision.INT8
    if default.precision == EmbeddingPrecision.INT8:
        other = EmbeddingPrecision.FLOAT32
    embedder = Embedder(precision=other)
    return default, measure_ingest(documents, work / f"ingest-rate-{other}", log, embedder=embedder)


def sample_questions(workload: RealWorkload, n: int) -> list[str]:
    """``n`` distinct asked questions, seeded."""
    distinct = sorted({normalize_query(q): q for q in workload.questions}.values())
    return random.Random(5).sample(distinct, min(n, len(distinct)))


def quality(vllm_url: str, template: Path, workload: RealWorkload, work: Path) -> QualityReport:
    """warmrag's retrieval (windows on and off) against llama-index defaults."""
    golds = workload.gold_questions()
    data = work / "quality"
    shutil.copytree(template, data)
    with service(vllm_url, data, warmup_enabled=False) as svc:
        runtime = svc.server.runtime
        started = time.perf_counter()
        ours = evaluate_service(runtime.retriever, golds)
        seconds = time.perf_counter() - started
        plain_chunks = Retriever(runtime.kb, runtime.selector, runtime.settings.kg_max_triples)
        chunks_only = evaluate_service(plain_chunks, golds)
    defaults = evaluate_llamaindex_defaults(
        workload.documents(), golds, WarmragEmbedding(shared_embedder())
    )
    fixed, broken = ours.fixed_and_broken(defaults)
    return QualityReport(
        warmrag=ours.summary(),
        warmrag_windows_off=chunks_only.summary(),
        llamaindex_defaults=defaults.summary(),
        llamaindex_index_s=round(defaults.seconds, 1),
        retrieval_ms_per_question=round(seconds * 1000 / max(1, len(golds)), 2),
        fixed_vs_defaults=fixed,
        broken_vs_defaults=broken,
        per_question=_ranks(ours, defaults),
    )


def _ranks(ours: Quality, defaults: Quality) -> list[QuestionRank]:
    theirs = {r.question: r.rank for r in defaults.results}
    return [
        QuestionRank(
            question=r.question, gold=r.gold, rank=r.rank, defaults_rank=theirs.get(r.question)
        )
        for r in ours.results
    ]


def cold_then_warm(
    vllm_url: str, template: Path, data: Path, questions: list[str], overrides: Overrides
) -> VariantResult:
    """Each question on an emptied prefix cache (a miss), then all of them again (hits:
    the first asking cached each prefix). No warmup runs, so vLLM serves only these."""
    shutil.copytree(template, data)
    reset_prefix_cache(vllm_url)
    settings: Overrides = {**overrides, "warmup_enabled": False}
    with service(vllm_url, data, **settings) as svc:
        misses = measure_breakdown(svc, vllm_url, questions)
        hits = measure_breakdown(svc, vllm_url, questions)
    return VariantResult(
        overrides=overrides,
        misses=summarize_rows(misses),
        hits=summarize_rows(hits),
        rows=VariantRows(misses=misses, hits=hits),
    )


def compare_answers(
    vllm_url: str, template: Path, work: Path, questions: list[str]
) -> AnswerComparison:
    """The same questions answered (greedy, ``ANSWER_TOKENS``) with block alignment on
    and off: how many answers are identical, and their lengths."""
    answers: dict[str, list[str]] = {}
    for name, align in (("aligned", True), ("unaligned", False)):
        data = work / f"answers-{name}"
        shutil.copytree(template, data)
        with service(
            vllm_url, data, warmup_enabled=False, max_tokens=ANSWER_TOKENS, prefix_block_align=align
        ) as svc:
            answers[name] = [reply.answer for reply in ask_all(svc, questions)]
    pairs = list(zip(questions, answers["aligned"], answers["unaligned"], strict=True))
    return AnswerComparison(
        n=len(questions),
        identical=sum(a == b for _, a, b in pairs),
        mean_words={
            k: round(statistics.mean(len(a.split()) for a in v), 1) for k, v in answers.items()
        }
        if questions
        else {},
        examples=[AnswerExample(question=q, aligned=a, unaligned=b) for q, a, b in pairs[:3]],
    )
