"""The warmup strategies the suite compares, as service settings on a vLLM.

0 and 1 are what plain llama-index + vLLM gives (prefix caching off / on); 2, 3 and 5
are the seed's other strategies (``WARMRAG_WARMUP_STRATEGY``); 4 is warmrag's default
(with the knowledge base's predicted questions, on by default since they were measured).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from typing_extensions import TypedDict  # pydantic reads it (a variant's overrides) on 3.11

from rag.chat.prompt import PassageOrder
from rag.knowledge.models import ChunkingStrategy
from warmup.settings import WarmupSettings


class Overrides(TypedDict, total=False):
    """The service settings (``api.config.Settings``, by their keyword names) a benchmark
    sets on top of the harness's own (``bench.harness.service``)."""

    warmup_enabled: bool
    warmup_strategy: str
    warmup_document_queries: bool
    warmup_document_query_source: str
    warmup_residency: bool
    warmup_retouch_share: float
    warmup_retouch_at: float
    warmup_budget_share: float
    passage_window_tokens: int
    prefix_block_align: bool
    max_tokens: int
    chat_frequency_penalty: float
    chat_stop_on_repeat: bool
    passage_order: PassageOrder
    chunking: ChunkingStrategy
    kg_extraction: bool
    seed_sample_kb: bool
    served_model_name: str
    router_policy: str
    replica_health_interval_s: float


@dataclass(frozen=True)
class Strategy:
    number: int
    name: str
    settings: Overrides = field(default_factory=Overrides)
    prefix_caching: bool = True
    # The change scenario runs where it tells something new: 2 follows the knowledge
    # base no more than 1 does, 5 re-warms exactly as 4 does, 0 caches nothing.
    runs_change: bool = True

    @property
    def slug(self) -> str:
        return f"s{self.number}"

    @property
    def label(self) -> str:
        return f"{self.number}. {self.name}"

    @property
    def warms(self) -> bool:
        """Whether the service runs a warmup layer (admin warmup endpoints answer)."""
        return self.settings.get("warmup_enabled", True)

    @property
    def predicts(self) -> bool:
        """Whether it predicts questions from new documents (it ingests them itself)."""
        default = WarmupSettings.model_fields["document_queries"].default
        return self.warms and self.settings.get("warmup_document_queries", default)


_OFF = Overrides(warmup_enabled=False)

STRATEGIES: tuple[Strategy, ...] = (
    Strategy(0, "prefix caching off", _OFF, prefix_caching=False, runs_change=False),
    Strategy(1, "caching, no warmup", _OFF),
    Strategy(
        2,
        "batch synthetic requests",
        Overrides(warmup_strategy="synthetic", warmup_document_queries=False),
        runs_change=False,
    ),
    Strategy(
        3,
        "hot queries, KB-blind",
        Overrides(warmup_strategy="hot_queries", warmup_document_queries=False),
    ),
    Strategy(
        4,
        "knowledge-aware (warmrag)",
        Overrides(warmup_strategy="knowledge_aware", warmup_document_queries=True),
    ),
    Strategy(
        5,
        "hybrid",
        Overrides(warmup_strategy="hybrid", warmup_document_queries=True),
        runs_change=False,
    ),
)
OURS = STRATEGIES[4]
PLAIN = STRATEGIES[1]


def by_number(number: int) -> Strategy:
    return next(s for s in STRATEGIES if s.number == number)
