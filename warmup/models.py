"""Records of the warmup layer."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class WarmupStrategy(StrEnum):
    """What the warmup layer warms, and whether it follows the knowledge base.

    The seed's strategies, side by side (``bench/`` compares them):

    - ``knowledge_aware``: contexts of hot and predicted queries (the registry), re-warmed
      when their retrieval changes and extended when it does not (the default);
    - ``hot_queries``: the registry of hot queries only; knowledge-base changes are not
      followed, so a changed context stays warm with its old passages until its TTL;
    - ``synthetic``: a batch of generic synthetic requests at start-up and with each hot
      cycle; no registry;
    - ``hybrid``: ``knowledge_aware`` plus the synthetic batch.
    """

    KNOWLEDGE_AWARE = "knowledge_aware"
    HOT_QUERIES = "hot_queries"
    SYNTHETIC = "synthetic"
    HYBRID = "hybrid"

    @property
    def uses_registry(self) -> bool:
        return self is not WarmupStrategy.SYNTHETIC

    @property
    def follows_kb(self) -> bool:
        return self in (WarmupStrategy.KNOWLEDGE_AWARE, WarmupStrategy.HYBRID)

    @property
    def sends_synthetic(self) -> bool:
        return self in (WarmupStrategy.SYNTHETIC, WarmupStrategy.HYBRID)


# Generic questions that fit any knowledge base: the ``synthetic`` strategy's batch.
SYNTHETIC_QUERIES: tuple[str, ...] = (
    "What is this about?",
    "Give me an overview.",
    "What are the most important facts?",
    "Summarize the key points.",
    "What should I know first?",
    "Explain the background.",
    "What are the main topics?",
    "Tell me something interesting.",
)


class DeclineReason(StrEnum):
    """Why warmup did not warm a context it was asked or planned to; the label of
    ``warmrag_warmup_declined_total``, and the keys of a report's ``declined``."""

    OVER_BUDGET = "over_budget"  # no room left in the warm budget, nothing colder to displace
    KV_FULL = "kv_full"  # vLLM's KV usage passed the threshold: the rest waits
    NO_BUDGET = "no_budget"  # the budget's share is 0 (KV memory under 4 GiB, or the setting)
    NO_FULL_BLOCK = "no_full_block"  # shorter than one KV block: nothing could be reused


class RewarmReason(StrEnum):
    """Why a prefix was (re)warmed; the label of ``warmrag_rewarm_total``."""

    SEED = "seed"
    PREDICTED = "predicted"  # a question predicted from a new document (first sight)
    HOT = "hot"
    KB_CHANGE = "kb_change"
    EVICTED = "evicted"
    FAILOVER = "failover"  # its vLLM replica went down: warmed on the next one
    STARTUP = "startup"
    EXPIRED_HOT = "expired_hot"
    SYNTHETIC = "synthetic"
    KV_EVICTED = "kv_evicted"  # vLLM's events showed a hot entry lose a block
    RETOUCH = "retouch"  # a hot entry near the LRU tail, sent again to keep it resident


class QueryRecord(BaseModel):
    """One normalized question: its embedding, how hot it is, and its warm entry."""

    key: str
    text: str
    count: float = 0.0  # decayed to ``last_seen``
    last_seen: float = 0.0
    seed: bool = False
    fingerprint: str | None = None
    kth_score: float | None = Field(
        None, description="Score of the last passage of its top-k when warmed (detection bound)."
    )
    fact_bar: float | None = Field(
        None,
        description="Score of its weakest injected fact when every fact slot was taken "
        "(detection bound; None: the selector's threshold).",
    )


class WarmEntry(BaseModel):
    """A prefix kept warm in vLLM: the exact messages, what they were built from, its TTL."""

    fingerprint: str
    messages: list[dict[str, str]]
    chunk_ids: list[str]
    doc_ids: list[str]
    content_hashes: list[str]
    triples: list[list[str]]
    prefix_tokens: int = Field(description="Tokens warmed: what the entry holds in the cache.")
    cached_block_tokens: int = Field(description="Warmed tokens in full KV blocks: what can hit.")
    context_tokens: int | None = Field(
        None,
        description="The whole prefix's tokens where it is longer than the per-entry share "
        "and only its first prefix_tokens were warmed (None: all of it was warmed).",
    )
    warmed_at: float
    expires_at: float
    hits: int = 0
    last_hit: float | None = None
    queries: list[str] = Field(default_factory=list)
    replica: str | None = Field(
        None, description="The vLLM replica that holds it (None: a single vLLM server)."
    )

    @property
    def partial(self) -> bool:
        """Only the first part of the prefix was warmed (the per-entry share's limit)."""
        return self.context_tokens is not None and self.context_tokens > self.prefix_tokens

    @property
    def warm_limit(self) -> int | None:
        """The tokens a prefill of this entry sends: its warmed part where partial."""
        return self.prefix_tokens if self.partial else None
