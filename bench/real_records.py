"""What the real-corpus section writes (``bench.real_section``): the ingest rate, the
corpus, retrieval quality, the strategies, the TTFT breakdown of its variants and the
answers with and without block alignment; the report reads them back.

The section fills ``RealResult`` step by step, so a failure keeps what came before it.
Fields with a default are the ones a part may lack; see ``bench.record``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field, computed_field

from bench.record import GrowingRecord, Record
from bench.scenario_records import CorpusIngest, Floor, StrategyResult
from bench.strategies import Overrides
from bench.workload import Sized

#: A median or count as measured: a median of whole numbers stays one.
Number = int | float


@dataclass(frozen=True)
class RealSpec(Sized):
    """The knobs of a real-corpus run, as ``bench.workload.WorkloadSpec`` for towns."""

    QUICK: ClassVar[dict[str, int]] = {
        "sections": 80,
        "question_sections": 40,
        "steady_requests": 80,
        "restart_requests": 30,
    }

    sections: int = 300
    # A cold prefill of these ~1.3k-token contexts takes seconds on a 2-core CPU: 100
    # asked sections and 200 steady requests keep the section within the hour.
    question_sections: int = 100
    steady_requests: int = 200
    restart_requests: int = 100
    zipf_s: float = 1.1
    seed: int = 7


class RunRate(Record):
    """One ingest run: how long it took and what it produced."""

    seconds: float
    cpu_seconds: float  # this process's CPU time: steadier than wall time on a shared machine
    chunks: int
    words: int
    stages: dict[str, float] = Field(default_factory=dict)  # wall seconds per stage
    cpu_stages: dict[str, float] = Field(default_factory=dict)  # CPU seconds per stage

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds if self.seconds else 0.0

    @property
    def words_per_s(self) -> float:
        return self.words / self.seconds if self.seconds else 0.0

    @property
    def chunks_per_cpu_s(self) -> float:
        return self.chunks / self.cpu_seconds if self.cpu_seconds else 0.0


class IngestRate(Record):
    """Raw embedding, chunk-only and end-to-end ingest rates on the same documents."""

    documents: int
    batch_size: int
    embedder_threads: int
    #: The embedding precision (``EmbeddingPrecision``); records before it: float32.
    precision: str = "float32"
    raw: RunRate
    chunk_only: RunRate
    end_to_end: RunRate
    triples: int
    nodes: int
    #: The whole ingest again, the graph's parse beside the chunks' embedding
    #: (``Settings.kg_parse_beside_embedding``); None where not run.
    parse_beside: RunRate | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio(self) -> float:
        """End-to-end chunks/s over raw embedding chunks/s."""
        return self.end_to_end.chunks_per_s / self.raw.chunks_per_s

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cpu_ratio(self) -> float:
        """The same ratio in chunks per CPU second (what contention does not change)."""
        return self.end_to_end.chunks_per_cpu_s / self.raw.chunks_per_cpu_s


class WordsPerSection(Record):
    median: Number
    p90: int
    max: int


class CorpusFacts(Record):
    """Counts and sizes of a real workload's corpus (``bench.real_corpus.describe``)."""

    sections: int
    words: int
    words_per_section: WordsPerSection
    capped_sections: int
    questions: int
    asked_questions: int
    sources: int


class QualitySummary(Record):
    """Recall@1/3/10, MRR and gold text in prompt over ``n`` questions, rounded."""

    n: int
    recall_at_1: float
    recall_at_3: float
    recall_at_10: float
    mrr: float
    gold_text_in_prompt: float


class QuestionRank(Record):
    question: str
    gold: str
    rank: int | None
    defaults_rank: int | None


class QualityReport(Record):
    """warmrag's retrieval (windows on and off) against llama-index defaults."""

    warmrag: QualitySummary
    warmrag_windows_off: QualitySummary
    llamaindex_defaults: QualitySummary
    llamaindex_index_s: float
    retrieval_ms_per_question: float
    fixed_vs_defaults: list[str]
    broken_vs_defaults: list[str]
    per_question: list[QuestionRank]


class BreakdownRow(Record):
    """One question's TTFT in parts (``bench.breakdown``); ``alone``: vLLM served nothing
    else meanwhile, so its histogram deltas are this request's own."""

    question: str
    alone: bool
    client_ttft_ms: float
    ttft_ms: float
    retrieval_ms: float
    prompt_ms: float
    llm_ttft_ms: float
    context_reused: bool
    prompt_tokens: int
    cached_tokens: int
    prefix_tokens: int | None
    warm_hit: bool
    queue_ms: float
    prefill_ms: float
    vllm_ttft_ms: float
    hop_ms: float
    to_vllm_ms: float


class BreakdownMedian(Record):
    client_ttft_ms: Number
    hop_ms: Number
    retrieval_ms: Number
    prompt_ms: Number
    to_vllm_ms: Number
    queue_ms: Number
    prefill_ms: Number
    vllm_ttft_ms: Number
    prompt_tokens: Number
    cached_tokens: Number


class BreakdownSummary(Record):
    """Medians over the requests vLLM served alone; none given for no requests."""

    n: int
    hits: int | None = None
    reused: int | None = None
    median: BreakdownMedian | None = None


class VariantRows(Record):
    misses: list[BreakdownRow]
    hits: list[BreakdownRow]


class VariantResult(Record):
    """Each question asked on an emptied cache (misses), then again (hits)."""

    overrides: Overrides
    misses: BreakdownSummary
    hits: BreakdownSummary
    rows: VariantRows


class AnswerExample(Record):
    question: str
    aligned: str
    unaligned: str


class AnswerComparison(Record):
    """The same questions answered with block alignment on and off."""

    n: int
    identical: int
    mean_words: dict[str, float]
    examples: list[AnswerExample]


class RealResult(GrowingRecord):
    """The section's parts, each given once measured."""

    ingest_rate: IngestRate | None = None
    #: The same ingest embedded in int8 (``EmbeddingPrecision``), run after the default's
    #: where the default is float32.
    ingest_int8: IngestRate | None = None
    #: The same ingest in float32, run after the default's where the default is int8.
    ingest_float32: IngestRate | None = None
    corpus: CorpusFacts | None = None
    spec: RealSpec | None = None
    strategies: dict[str, StrategyResult] = Field(default_factory=dict)
    floor: Floor | None = None
    corpus_ingest: CorpusIngest | None = None
    quality: QualityReport | None = None
    variants: dict[str, VariantResult] = Field(default_factory=dict)
    answers: AnswerComparison | None = None
