"""A data folder of a given size, committed the way the service commits one, for the scale
benchmarks that start the service or open its graph on it (``bench.scale_startup``,
``bench.kg_memory``): the index's points and the knowledge base's state from the scale
section's copies of real chunks (``bench.scale_copies``), and a graph of the real corpus's
density filed under the same documents with their versions, so a start finds nothing to
re-sync."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from llama_index.core.schema import BaseNode, Document

from api.config import Settings
from bench.entity_vectors import ShapedEmbedder, VectorShape
from bench.kg_subgraph import RandomEmbedder, entity_name
from bench.scale_copies import Chunk, copies_between
from kg import KnowledgeGraph, Triple, snapshot_file
from rag.knowledge.edge import EdgeIndex
from rag.knowledge.ingest import DOC_HASH_KEY
from rag.knowledge.state import KBState

#: The real corpus's graph per chunk (1,047 chunks: 3,384 triples, 2,193 entities).
GRAPH_PER_CHUNK = (3384 / 1047, 2193 / 1047)
PREDICATES = ["part of", "located in", "created by", "depends on", "uses", "owns", "near"]
#: Chunks whose documents ``build_graph`` files through one graph before it closes it.
BUILD_BATCH_CHUNKS = 100_000


def build_kb(
    folder: Path,
    chunks: list[Chunk],
    vectors: np.ndarray,
    size: int,
    log: Callable[[str], None],
    embedding: str,
) -> dict[str, tuple[str, int]]:
    """``size`` points in the service's own index and state under ``folder`` (its data
    directory), each document's chunks committed through ``KBState.put`` as an ingest
    commits them; returns each document's (content hash, chunk count).

    ``embedding``: the identity of the embedder that made ``vectors``
    (``Embedder.identity``), recorded as an ingest records it. A folder without it reads
    as one from before the record, which was float32: a service started on it would
    embed in float32 whatever its default."""
    settings = Settings(data_dir=folder)
    index = EdgeIndex(settings.edge_path, vectors.shape[1])
    index.open()
    state = KBState.open(folder)
    state.start_loose_log()  # as a folder the service made has it: a start checks no scan
    state.check_embedding(embedding)
    documents: dict[str, tuple[str, int]] = {}
    rng = np.random.default_rng(17)
    started = time.perf_counter()
    done = 0
    held: list[BaseNode] = []  # a document's first chunks, when its last is in the next batch
    try:
        for nodes in copies_between(chunks, vectors, 0, size, rng):
            index.add(nodes)
            held.extend(nodes)
            last = held[-1].ref_doc_id
            complete = [n for n in held if n.ref_doc_id != last]
            held = [n for n in held if n.ref_doc_id == last]
            commit_documents(state, complete, documents)
            done += len(nodes)
            if done % 50_000 == 0:
                log(f"  {done} points in {time.perf_counter() - started:.0f} s")
        commit_documents(state, held, documents)
        log(f"  HNSW build for {size} points ...")
        index.optimize()
        state.version += 1
        state.save()  # the commit point
    finally:
        index.close()
        state.close()
    return documents


def commit_documents(
    state: KBState, nodes: list[BaseNode], documents: dict[str, tuple[str, int]]
) -> None:
    """Make the documents of ``nodes`` (each document's chunks all there) current."""
    by_doc: dict[str, list[BaseNode]] = {}
    for node in nodes:
        by_doc.setdefault(node.ref_doc_id or "", []).append(node)
    docs = []
    for doc_id, doc_nodes in by_doc.items():
        doc_hash = str(doc_nodes[0].metadata[DOC_HASH_KEY])
        docs.append(Document(id_=doc_id, text="", metadata={DOC_HASH_KEY: doc_hash}))
        documents[doc_id] = (doc_hash, len(doc_nodes))
    state.put(docs, nodes, {})


def build_graph(
    folder: Path,
    documents: dict[str, tuple[str, int]],
    with_triples: bool = True,
    keep_snapshot: bool = False,
    log: Callable[[str], None] = lambda _: None,
    shape: VectorShape | None = None,
) -> tuple[int, int]:
    """A graph at ``folder/kg`` with the real corpus's triples and entities per chunk for
    each document (none without ``with_triples``: documents that yield no triples), filed
    with the document's version as the service's sync files them, so a start finds
    nothing to re-sync; returns (triples, entities).

    The documents are filed ``BUILD_BATCH_CHUNKS`` chunks at a time, each batch by a graph
    opened on what the last one saved at its close, as a service that ingests and
    restarts would: the vectors of earlier batches stay in their mapped files, so a
    build of 1,000,000 chunks (3.2 million triples, 8 GB of vectors) fits in memory.
    The snapshot the last close saved is removed unless ``keep_snapshot``: the first
    start then reads every row, as after a crash. Each batch is logged (1,000,000
    chunks take 25-30 minutes here). The vectors are drawn with ``shape``
    (``bench.entity_vectors``; None: random unit vectors, which no question links to)."""
    rng = np.random.default_rng(5)
    chunk_count = sum(n for _, n in documents.values())
    per_chunk, entities_per_chunk = GRAPH_PER_CHUNK if with_triples else (0.0, 0.0)
    entities = max(1, round(entities_per_chunk * chunk_count))
    weights = 1.0 / (np.arange(entities) + 10.0) ** 0.9
    weights /= weights.sum()
    counts = rng.poisson(per_chunk * np.array([n for _, n in documents.values()]))
    ends = rng.choice(entities, size=(int(counts.sum()), 2), p=weights)
    ends[:entities, 0] = rng.permutation(entities)[: len(ends)]  # every entity used once
    same = ends[:, 0] == ends[:, 1]
    ends[same, 1] = (ends[same, 1] + 1) % entities
    batch: dict[str, list[Triple]] = {}
    batch_chunks, first, filed, done = 0, 0, (0, 0), 0
    started = time.perf_counter()
    for (doc_id, (_, chunks)), count in zip(documents.items(), counts, strict=True):
        batch[doc_id] = [
            Triple(
                subject=entity_name(int(s)),
                predicate=PREDICATES[i % len(PREDICATES)],
                object=entity_name(int(o)),
                doc_id=doc_id,
                chunk_id=f"{doc_id}#{i % chunks}",
                source="extracted",
            )
            for i, (s, o) in enumerate(ends[first : first + count])
        ]
        first += count
        batch_chunks += chunks
        if batch_chunks >= BUILD_BATCH_CHUNKS:
            filed = _file_batch(folder / "kg", batch, documents, first, shape)
            done += batch_chunks
            batch, batch_chunks = {}, 0
            took = time.perf_counter() - started
            log(f"  graph: {done} of {chunk_count} chunks filed in {took:.0f} s")
    if batch:
        filed = _file_batch(folder / "kg", batch, documents, first, shape)
    if not keep_snapshot:
        snapshot_file.remove(folder / "kg")
    return filed


def _file_batch(
    folder: Path,
    batch: dict[str, list[Triple]],
    documents: dict[str, tuple[str, int]],
    seed: int,
    shape: VectorShape | None,
) -> tuple[int, int]:
    """File ``batch`` through a graph on ``folder``, closed after (its snapshot saved)."""
    embed = RandomEmbedder(seed) if shape is None else ShapedEmbedder(shape, seed)
    graph = KnowledgeGraph(folder, embed)
    try:
        graph.replace_documents(batch, {d: documents[d][0] for d in batch})
        return graph.edge_count, graph.node_count
    finally:
        graph.close()
