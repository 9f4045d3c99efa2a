"""What the sections without vLLM write: "scale" (``bench.scale``: ingest, retrieval,
subgraph, graph quality, detection, and the service's start-up, the one part with a vLLM
of its own) and "index" (``bench.embedded_index``).

Fields with a default are the ones older results.json files lack, or that only some
rows have; see ``bench.record``.
"""

from __future__ import annotations

from pydantic import Field

from bench.record import Record


class ScaleIngest(Record):
    """Chunks/s through ``KnowledgeBase.upsert`` against the embedding model alone."""

    chunks: int
    documents: int
    ingest_chunks_per_s: float
    raw_chunks_per_s: float
    ratio: float


class RetrievalRow(Record):
    """``kb.retrieve`` at one collection size (query embedding excluded); the index's
    own figures where the run had them (before Qdrant Edge: an in-memory Qdrant)."""

    chunks: int
    p50_ms: float
    p95_ms: float
    queries: int
    top1_own_town_share: float | None = None
    p99_ms: float | None = None
    recall_at_10: float | None = None  # of the index's top 10, against exact search
    index_s: float | None = None  # the HNSW build after the last inserts
    search_wait_max_s: float | None = None  # the longest a search sent during it waited
    open_s: float | None = None  # the knowledge base opened again: a restart's share
    rss_mib: int | None = None  # the bench's process, as the service's
    index_rss_mib: int | None = None  # the index's own process


class SubgraphRow(Record):
    """Subgraph selection at one graph size (``bench.kg_subgraph``)."""

    triples: int
    p50_ms: float
    p99_ms: float
    questions: int


class GraphQualityRow(Record):
    """Two-step questions under one selection mode (``bench.kg_multihop``)."""

    questions_set: str
    mode: str
    questions: int
    answer_share: float
    restating_selections: float
    p50_ms: float


class DetectionRow(Record):
    """Change detection against one registry size (``bench.detection_scaling``)."""

    entries: int
    cold_p50_ms: float
    warm_p50_ms: float


class StartUpRow(Record):
    """The service started on a data folder of ``chunks`` chunks (``bench.scale_startup``):
    seconds from its process's start, with a vLLM already running."""

    chunks: int
    triples: int
    entities: int
    #: The embedder the folder recorded (``Embedder.identity``): what the start embedded
    #: with. Records before it: empty (float32, whatever the host's default).
    embedding: str = ""
    #: The start followed a clean stop: the graph's snapshot was read back, not rebuilt
    #: from its rows (``kg.snapshot_file``). Records before it: False.
    after_stop: bool = False
    build_s: float  # making the folder, not part of the start
    health_s: float  # the stores opened
    ready_s: float
    service_rss_mib: int  # at /ready
    settled_rss_mib: int  # once the graph for changes is built too
    service_peak_mib: int
    #: The peak by ``/ready``: the start's own, before the first change builds what the
    #: graph's changes edit. Records before it: 0.
    ready_peak_mib: int = 0
    index_rss_mib: int
    first_chat_s: float
    passages: int
    #: One small document ingested after the chat: the first change builds what the
    #: graph's changes edit, which a start leaves. Records before it: 0.
    first_change_s: float = 0.0
    #: Of ``settled_rss_mib``, the process's own memory (``RssAnon``); the rest is mapped
    #: files' pages, the graph's saved vectors among them. Records before it: 0.
    settled_anon_mib: int = 0
    #: Retrievals served after the first change (``/admin/kg/subgraph``: the question
    #: embedded, the index searched, the graph's facts selected), their latency, and the
    #: RSS of the service (all, its own) and of the index's process after them; then the
    #: clean stop's seconds. Records before them: 0.
    questions: int = 0
    question_p50_ms: float = 0.0
    question_p99_ms: float = 0.0
    #: Facts injected per question, averaged. Records before it: 0 (their questions named
    #: an entity each, and the entities' random vectors linked none by embedding).
    question_facts: float = 0.0
    questions_rss_mib: int = 0
    questions_anon_mib: int = 0
    questions_index_rss_mib: int = 0
    #: Then retrievals one every ``bench.service_start.PACE_S``, as a chat service's
    #: questions come, not back to back. Records before them: 0.
    paced: int = 0
    paced_p50_ms: float = 0.0
    paced_p99_ms: float = 0.0
    stop_s: float = 0.0


class EntityCellsRow(Record):
    """The entity link by embedding with cells (``kg.cells``) against reading every row
    (both turned, ``kg.lead_rows``), at one graph size (``bench.entity_cells``)."""

    entities: int
    questions: int
    #: Entities the full scan links per question (at least 0.5, the best five).
    linked_per_question: float
    #: Of those, the share the cells' scan links too.
    recall: float
    #: Questions whose linked entities are the full scan's, all of them.
    same_choice: float
    #: Share of the rows a question's cells hold.
    read_share: float
    every_row_ms_p50: float
    cells_ms_p50: float
    every_row_ms_mean: float
    cells_ms_mean: float
    #: Coding every row at a load: turned alone, and turned and filed under cells (with
    #: the cells' fit).
    coding_s: float
    coding_cells_s: float


class ScaleResult(Record):
    ingest: ScaleIngest
    retrieval: list[RetrievalRow]
    subgraph: list[SubgraphRow]
    graph_quality: list[GraphQualityRow] = Field(default_factory=list)
    detection: list[DetectionRow]
    startup: list[StartUpRow] = Field(default_factory=list)
    entity_link: list[EntityCellsRow] = Field(default_factory=list)


class IndexRow(Record):
    """One embedded store at one size. A row extrapolated from a smaller size has the
    latencies and the reopen time only; ``indexed_vectors`` is Qdrant Edge's."""

    store: str
    size: int
    extrapolated: bool
    insert_per_s: int | None = None
    timed_inserts: int | None = None
    index_s: float | None = None
    indexed_vectors: int | None = None
    filtered_queries: int | None = None
    nofilter_queries: int | None = None
    p50_ms: float
    p99_ms: float
    p50_nofilter_ms: float
    recall_at_10: float | None = None
    rss_mb: int | None = None
    reopen_s: float
    first_query_ms: float | None = None


class EmbeddedIndexResult(Record):
    dim: int
    clusters: int
    queries: int
    top_k: int
    rows: list[IndexRow]
