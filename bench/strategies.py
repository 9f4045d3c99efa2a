"""The warmup strategies the suite compares, as service settings on a vLLM.

0 and 1 are what plain llama-index + vLLM gives (prefix caching off / on); 2, 3 and 5
are the seed's other strategies (``WARMRAG_WARMUP_STRATEGY``); 4 is warmrag's default
with the knowledge base's predictions (one question per new document) turned on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Strategy:
    number: int
    name: str
    settings: dict[str, Any] = field(default_factory=dict)
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
        return bool(self.settings.get("warmup_enabled", True))


_OFF = {"warmup_enabled": False}

STRATEGIES: tuple[Strategy, ...] = (
    Strategy(0, "prefix caching off", _OFF, prefix_caching=False, runs_change=False),
    Strategy(1, "caching, no warmup", _OFF),
    Strategy(2, "batch synthetic requests", {"warmup_strategy": "synthetic"}, runs_change=False),
    Strategy(3, "hot queries, KB-blind", {"warmup_strategy": "hot_queries"}),
    Strategy(
        4,
        "knowledge-aware (warmrag)",
        {"warmup_strategy": "knowledge_aware", "warmup_document_queries": True},
    ),
    Strategy(
        5,
        "hybrid",
        {"warmup_strategy": "hybrid", "warmup_document_queries": True},
        runs_change=False,
    ),
)
OURS = STRATEGIES[4]
PLAIN = STRATEGIES[1]


def by_number(number: int) -> Strategy:
    return next(s for s in STRATEGIES if s.number == number)
