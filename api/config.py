"""The service's one configuration object, read from ``WARMRAG_*`` environment variables."""

from __future__ import annotations

import shlex
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from api import config_checks as checks
from api.logs import LogFormat
from rag.chat.prompt import PassageOrder
from rag.knowledge.models import (
    DEFAULT_CHUNKING,
    ChunkingStrategy,
    EmbeddedIndex,
    EmbeddingPrecision,
    QuestionPrecision,
)
from rag.llm.placement import RoutingPolicy
from warmup.settings import WarmupSettings

_WARMUP = "warmup_"


class Settings(BaseSettings):
    """Every knob of warmrag; the README documents each one.

    Defaults describe the embedded deployment: one process that owns a Qdrant Edge
    shard (in a child process) and a vLLM-CPU child, all state under ``data_dir``.
    """

    model_config = SettingsConfigDict(
        env_prefix="WARMRAG_",
        extra="ignore",
        # WARMRAG_WARMUP_TTL_S → warmup.ttl_s: split once, after the nested model's name.
        env_nested_delimiter="_",
        env_nested_max_split=1,
    )

    # HTTP
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    admin_token: SecretStr | None = Field(
        None,
        description="Bearer token for /admin routes; unset or blank: admin routes refuse (403).",
    )
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="Bearer keys for /v1/* (comma-separated or a JSON list); none: /v1 is open.",
    )
    max_request_bytes: int = Field(
        16 * 1024**2, ge=1024, description="Largest request body; larger ones get 413 unread."
    )
    chat_rate_limit: str | None = Field(
        None,
        description="Chats per client, e.g. '5/second;100/minute' (limits' notation); unset: none.",
    )
    chat_max_concurrency: int | None = Field(
        None, ge=1, description="Chats in flight per client; unset: no limit."
    )
    bad_case_ttft_ms: float = Field(
        1000.0,
        gt=0,
        description="A chat whose first token comes later is kept as a bad case (the "
        "cold-start design's SLO: its heat map ends at 1 s).",
    )
    bad_case_max_entries: int = Field(
        1000, ge=1, description="Bad cases kept in memory (the oldest go first)."
    )
    log_format: LogFormat | None = Field(
        None,
        description="Log lines as 'json' objects (for a log collector) or 'text' for a "
        "terminal; unset: text when stderr is a terminal, JSON otherwise.",
    )

    # State
    data_dir: Path = Path("./data")
    seed_sample_kb: bool = Field(
        True, description="Ingest the bundled sample KB when the KB is empty."
    )

    # Vector store
    qdrant_url: str | None = Field(
        None, description="Use this Qdrant server instead of the embedded index."
    )
    embedded_index: EmbeddedIndex = Field(
        EmbeddedIndex.EDGE,
        description="The embedded vector index: 'edge' (Qdrant Edge, HNSW; a Qdrant local-mode "
        "folder moves into it on first start) or 'local' (Qdrant local mode: brute force, "
        "slow past about 20,000 chunks).",
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server.")
    qdrant_collection: str = "warmrag"
    qdrant_hnsw_m: int = Field(
        16, ge=4, le=128, description="HNSW edges per node, for a collection warmrag creates."
    )
    qdrant_hnsw_ef_construct: int = Field(
        100, ge=4, le=1000, description="HNSW build-time search width, same."
    )
    qdrant_lease_ttl_s: float = Field(
        60.0,
        ge=5.0,
        description="A writer's lease on a server collection lapses this long after its holder "
        "stops renewing it (renewed every third of it).",
    )
    instance_name: str | None = Field(
        None, description="This instance in lease errors and logs; default host:pid."
    )

    # Chat model served by vLLM
    vllm_url: str | None = Field(
        None,
        description="Use these vLLM servers (comma-separated: replicas), launch none.",
    )
    vllm_extra_args: str = Field(
        "", description="More flags for the vLLM child, shell-quoted (e.g. '--max-num-seqs 8')."
    )
    router_policy: RoutingPolicy = Field(
        RoutingPolicy.AFFINITY,
        description="affinity: each prefix to the replica that holds it; round_robin: "
        "what a plain load balancer does (a baseline).",
    )
    router_burst_headroom: float = Field(
        0.10,
        ge=0.0,
        lt=1.0,
        description="A replica with less free KV cache than this sends new prefixes onward.",
    )
    replica_health_interval_s: float = Field(
        5.0, gt=0, description="How often each vLLM replica's /health is polled."
    )
    replica_down_after_checks: int = Field(
        3,
        ge=1,
        description="Failed health checks in a row that mark a replica down (a request "
        "that cannot reach it marks it down at once).",
    )
    served_model_name: str = "SmolLM2-135M-Instruct"
    model_dir: Path | None = Field(None, description="HF model folder; default data_dir/models/...")
    vllm_port: int = Field(8001, ge=1, le=65535)
    vllm_kv_cache_gib: int = Field(
        4, ge=1, description="VLLM_CPU_KVCACHE_SPACE for the child (>= 4 turns warmup on)."
    )
    vllm_max_model_len: int = Field(4096, ge=512)
    vllm_dtype: Literal["auto", "bfloat16", "float32", "float16"] = Field(
        "auto", description="auto: bfloat16 where the CPU has it in hardware, else float32."
    )
    vllm_enforce_eager: bool | None = Field(
        None, description="Skip compilation; unset: eager on CPUs without AVX-512."
    )
    vllm_dev_mode: bool = Field(
        False, description="VLLM_SERVER_DEV_MODE=1 on the child (POST /reset_prefix_cache)."
    )
    vllm_kv_events: bool = Field(
        True,
        description="Start the vLLM child with KV-cache events (ZMQ, in data_dir/vllm): "
        "warmup's residency index follows what vLLM keeps and evicts.",
    )
    vllm_kv_events_endpoints: str | None = Field(
        None,
        description="External vLLM servers' KV-event endpoints, comma-separated in "
        "WARMRAG_VLLM_URL's order: 'tcp://host:5557' (its replay endpoint is the next "
        "port) or 'PUBLISH|REPLAY' (docs/warmup.md#residency).",
    )
    vllm_startup_timeout_s: float = Field(600.0, gt=0)
    llm_timeout_s: float = Field(300.0, gt=0, description="Per-read timeout to vLLM.")
    chat_deadline_s: float = Field(
        300.0, gt=0, description="A chat's whole answer must come within this (504 after)."
    )
    vllm_log_max_mib: int = Field(
        10, ge=1, description="vllm.log rotates at this size (3 backups are kept)."
    )
    vllm_restart_backoff_max_s: float = Field(
        60.0, gt=0, description="Longest wait between attempts to restart a dead vLLM child."
    )

    # Generation
    max_tokens: int = Field(256, ge=1, le=2048)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    chat_frequency_penalty: float = Field(
        1.0,
        ge=-2.0,
        le=2.0,
        description="vLLM's frequency_penalty for answers (the answer's own tokens, not "
        "the passages'); 0 turns it off. It keeps a small model from looping "
        "(docs/models.md).",
    )
    chat_stop_on_repeat: bool = Field(
        True,
        description="Stop an answer where it begins to repeat itself (a span of 48 "
        "characters said twice): the repeat is never shown.",
    )

    # Retrieval and ingestion
    top_k: int = Field(3, ge=1, le=20)
    passage_order: PassageOrder = Field(
        PassageOrder.STABLE,
        description="Passages in a prompt: 'stable' (by chunk id: the same retrieved set "
        "is the same prefix, whatever its score order) or 'rank' (retrieval's order).",
    )
    chunk_tokens: int = Field(
        200,
        ge=32,
        le=256,
        description="Chunk size in the embedding model's word-pieces (window 256).",
    )
    chunk_overlap_tokens: int = Field(20, ge=0)
    chunking: ChunkingStrategy = Field(
        DEFAULT_CHUNKING,
        description="structure: chunks follow Markdown headings, lists and code blocks, "
        "each embedded with its heading path; sentence: llama-index's sentence splitter "
        "(rag/knowledge/chunking.py). A document is re-chunked when it is next ingested.",
    )
    embed_title: bool = Field(
        True,
        description='Embed each chunk with its document\'s title (metadata "title"), '
        "as llama-index does; the prompt shows the text alone.",
    )
    embedding_precision: EmbeddingPrecision | None = Field(
        None,
        description="Unset: a new knowledge base embeds in int8 on an x86 CPU with AVX2 "
        "(or VNNI, AMX) and in float32 elsewhere and on a Qdrant server, an existing one in "
        "the precision it was embedded with. int8 (ONNX Runtime, 7-bit weights, so every "
        "x86 CPU computes the same vectors: about 2x float32's whole ingest on a CPU with "
        "VNNI, 1.6x with AVX2 alone, the same recall; questions as question_precision "
        "says), bfloat16 (on a CPU with bf16 in hardware: avx512_bf16, amx_bf16; about "
        "1.8x) or float32 ask for one: a knowledge base embedded in another refuses to "
        "start, saying so.",
    )
    question_precision: QuestionPrecision | None = Field(
        None,
        description="Unset: a question is embedded in int8 on a CPU with VNNI or AMX "
        "(ONNX Runtime's MatMulNBits, 8-bit weights and activations in blocks of 32: 70 % "
        "of float32's time on the real corpus, the same recall@3) and in float32 elsewhere "
        "(with AVX2 alone int8 took 1.09x float32's time) and on a Qdrant server. float32 "
        "or int8 ask for one. Knowledge bases embedded in bfloat16 embed questions in "
        "bfloat16 whatever this says.",
    )
    passage_window_tokens: int = Field(
        450,
        ge=0,
        le=2000,
        description="Each retrieved chunk is shown to the model widened to its neighbours "
        "in the same document, up to this many word-pieces (small-to-big; 0: off).",
    )
    identifier_rerank_candidates: int = Field(
        50,
        ge=0,
        le=200,
        description="For a question that names an identifier (a `backticked` span, "
        "foreign_keys, core.autocrlf, open(), --no-ff; "
        "rag/chat/identifiers.py), fetch this many chunks and move those that define or "
        "mention it ahead before taking top_k (0: off). Other questions retrieve top_k as "
        "before. On Git's documentation, recall@1 of such questions 0.175 -> 0.700.",
    )
    context_memo_max_entries: int = Field(
        4096,
        ge=1,
        description="Questions whose retrieval and prefix are remembered until a change "
        "touches them (least recently used out; a few KB each).",
    )
    prefix_block_align: bool = Field(
        True,
        description="Pad each prompt prefix to a whole number of vLLM's KV blocks, so that "
        "a warm hit recomputes only the question turn.",
    )

    # Knowledge graph
    kg_extraction: bool = Field(True, description="Extract triples from text with spaCy rules.")
    kg_parse_beside_embedding: bool = Field(
        False,
        description="Parse an ingest's chunks for the graph on a second core while they are "
        "embedded (rag/knowledge/graph_sync.py). On a 2-core AMD EPYC with AVX2 and no vLLM "
        "running: the real section's whole ingest 1.98-2.19x the code issue 26 was filed "
        "against instead of 1.68x; retrievals asked during an ingest took 16.5 ms p50 and "
        "34 ms p90 against 14 and 19 ms. Off: the embedded vLLM-CPU child spins on the other "
        "core. For bulk loads, or hosts with cores to spare.",
    )
    kg_max_triples: int = Field(3, ge=0, le=10, description="Triples injected per prompt.")
    kg_path_aware: bool = Field(
        True,
        description="Choose triples one at a time, preferring one that continues a path "
        "toward the relation the question asks for and penalising restatements (kg/paths.py); "
        "false: the best-scoring triples.",
    )
    kg_similarity_threshold: float = Field(
        0.5, ge=-1.0, le=1.0, description="Node-name similarity needed to link a question."
    )

    # Warmup (WARMRAG_WARMUP_*; warmup/settings.py)
    warmup: WarmupSettings = Field(default_factory=WarmupSettings)

    @model_validator(mode="before")
    @classmethod
    def _nest_warmup_keywords(cls, data: Any) -> Any:
        """``Settings(warmup_ttl_s=5)`` sets ``warmup.ttl_s``, as ``WARMRAG_WARMUP_TTL_S`` does
        (tests and the benchmark pass keywords so)."""
        return checks.nest_prefixed(data, _WARMUP, "warmup")

    _blank_token_is_unset = field_validator("admin_token", "qdrant_api_key", mode="after")(
        checks.blank_is_unset
    )
    _split_keys = field_validator("api_keys", mode="before")(checks.split_keys)
    _parse_rate = field_validator("chat_rate_limit", mode="after")(checks.rate)
    _check_vllm_urls = field_validator("vllm_url", mode="after")(checks.replica_urls)
    _check_kv_events_endpoints = field_validator("vllm_kv_events_endpoints", mode="after")(
        checks.zmq_endpoints
    )
    _check_extra_args = field_validator("vllm_extra_args", mode="after")(checks.shell_words)

    @model_validator(mode="after")
    def _kv_events_match_urls(self) -> Settings:
        endpoints = self.kv_events_endpoint_list
        if endpoints and len(endpoints) != len(self.vllm_urls):
            raise ValueError(
                f"WARMRAG_VLLM_KV_EVENTS_ENDPOINTS lists {len(endpoints)} endpoints for "
                f"{len(self.vllm_urls)} WARMRAG_VLLM_URL servers: give one per server, in order"
            )
        return self

    @property
    def kv_events_endpoint_list(self) -> list[str]:
        return self.vllm_kv_events_endpoints.split(",") if self.vllm_kv_events_endpoints else []

    @property
    def vllm_urls(self) -> list[str]:
        """The external vLLM replicas (empty: the embedded vLLM-CPU child)."""
        return self.vllm_url.split(",") if self.vllm_url else []

    @property
    def vllm_extra_argv(self) -> list[str]:
        return shlex.split(self.vllm_extra_args)

    @property
    def qdrant_is_remote(self) -> bool:
        return self.qdrant_url is not None

    @property
    def embedding_default(self) -> EmbeddingPrecision | None:
        """The precision a new knowledge base embeds in when none is asked for: float32
        on a Qdrant server's collection, whatever this CPU (instances on other CPUs
        write it too, and each data folder records only its own precision, so server
        mode stays as it was); else None, this host's (``default_precision``)."""
        return EmbeddingPrecision.FLOAT32 if self.qdrant_is_remote else None

    @property
    def question_default(self) -> QuestionPrecision | None:
        """What questions are embedded in: the setting; else float32 on a Qdrant server's
        collection, whatever this CPU (server mode stays as it was, as with
        ``embedding_default``); else None, this host's (``default_question_precision``)."""
        if self.question_precision is None and self.qdrant_is_remote:
            return QuestionPrecision.FLOAT32
        return self.question_precision

    @cached_property
    def resolved_model_dir(self) -> Path:
        return self.model_dir or self.data_dir / "models" / self.served_model_name

    @property
    def qdrant_path(self) -> Path:
        return self.data_dir / "qdrant"

    @property
    def edge_path(self) -> Path:
        return self.data_dir / "edge"
