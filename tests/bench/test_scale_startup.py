"""The scale section's start-up measurement (``bench.scale_startup``) on the test
session's vLLM: a data folder of real chunks' copies and a graph of the real corpus's
density, committed as the service commits them, then ``python -m api serve`` on it, and
again after its clean stop (the graph's snapshot read back)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import bench.scale_folder
from bench.entity_vectors import VectorShape
from bench.kg_subgraph import WORDS, RandomEmbedder
from bench.scale_copies import Chunk
from bench.scale_folder import GRAPH_PER_CHUNK, build_graph, build_kb
from bench.scale_startup import asked_questions, entity_questions, recorded_embedding, run
from kg import KnowledgeGraph, snapshot_file
from rag.knowledge.embedding import Embedder
from rag.llm.server import VLLMServer

TOWNS = [*WORDS, "Lyon", "Graz", "Rhone", "Styria", "Schlossberg", "UNESCO", "festival"]
TEXTS = [
    "Lyon is a city on the Rhone; its old town is listed by UNESCO.",
    "Lyon hosts a festival of lights every December.",
    "Graz is the capital of Styria, with a clock tower on the Schlossberg.",
]


def test_the_service_starts_on_a_built_folder_and_answers(
    tmp_path: Path, vllm: VLLMServer, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    chunks = [
        Chunk(f"town-{i // 2}", f"hash-{i // 2}", i % 2, text, {"title": f"town {i // 2}"})
        for i, text in enumerate(TEXTS)
    ]
    vectors = embedder.embed_texts(TEXTS)
    # Drawn like these names' vectors: some of them score 0.5 against the real questions.
    shape = VectorShape.fit(embedder.embed_texts([f"{a} {b}" for a in TOWNS for b in TOWNS]))
    rows = run(
        [300],
        True,
        tmp_path,
        chunks,
        vectors,
        log=lambda _: None,
        vllm_url=vllm.url,
        questions=4,
        paced=2,
        shape=shape,
        real=["Where is Lyon?", "What is Graz the capital of?"],
    )
    baseline, built, again = rows
    assert (baseline.chunks, baseline.triples) == (0, 0)
    assert built.chunks == again.chunks == 300 and again.triples == built.triples
    assert (baseline.after_stop, built.after_stop, again.after_stop) == (False, False, True)
    per_chunk, _ = GRAPH_PER_CHUNK
    assert 0.8 * per_chunk * 300 < built.triples < 1.2 * per_chunk * 300
    for row in rows:
        assert 0 < row.health_s <= row.ready_s and row.first_change_s > 0
        assert row.service_rss_mib > 0 and row.settled_rss_mib > 0 and row.index_rss_mib > 0
        assert 0 < row.settled_anon_mib <= row.settled_rss_mib
        # Served its questions, measured after them, and stopped cleanly (it raises if not).
        assert row.questions == 4 and 0 < row.question_p50_ms <= row.question_p99_ms
        assert row.question_facts >= 0
        assert row.paced == 2 and 0 < row.paced_p50_ms <= row.paced_p99_ms
        assert 0 < row.questions_anon_mib <= row.questions_rss_mib <= row.service_peak_mib
        assert row.questions_index_rss_mib > 0 and row.stop_s > 0
        assert row.service_rss_mib <= row.ready_peak_mib <= row.service_peak_mib
    # The question is answered from the folder's passages: its index and state agree.
    assert built.passages == again.passages == 3 and baseline.passages == 0
    # The service embedded as the vectors were made, not as a folder from before the
    # record (float32) would have it.
    assert built.embedding == again.embedding == embedder.identity
    assert not any(tmp_path.iterdir())  # each folder removed after its start


def test_the_built_folder_records_the_embedder_of_its_vectors(tmp_path: Path) -> None:
    chunks = [Chunk("town-0", "hash-0", i, t, {"title": "town 0"}) for i, t in enumerate(TEXTS)]
    vectors = np.eye(len(TEXTS), 8, dtype=np.float32)
    build_kb(tmp_path, chunks, vectors, 6, lambda _: None, embedding="model, 8 dims, runtime")
    assert recorded_embedding(tmp_path) == "model, 8 dims, runtime"


def test_the_graph_filed_in_batches_is_the_graph_filed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch's graph opens on what the last closed (its vectors mapped, not held),
    and files the next documents: the graph is the one a single batch gives."""
    documents = {f"doc-{i}": (f"hash-{i}", 10) for i in range(30)}
    once = build_graph(tmp_path / "once", documents)
    monkeypatch.setattr(bench.scale_folder, "BUILD_BATCH_CHUNKS", 70)
    batched = build_graph(tmp_path / "batched", documents, keep_snapshot=True)
    assert batched == once and once[0] > 0
    assert not list((tmp_path / "once" / "kg").glob("snapshot*"))  # read as after a crash
    assert (tmp_path / "batched" / "kg" / snapshot_file.FILE).is_file()
    embed = RandomEmbedder(seed=3)
    a, b = (KnowledgeGraph(tmp_path / name / "kg", embed) for name in ("once", "batched"))
    versions = {d: h for d, (h, _) in documents.items()}
    assert a.document_versions() == b.document_versions() == versions
    for doc_id in documents:
        assert a.triples_for_document(doc_id) == b.triples_for_document(doc_id)


def test_the_questions_alternate_between_naming_an_entity_and_the_real_ones() -> None:
    named = entity_questions(1000, 3)
    real = ["How do I merge?", "What does rebase do?"]
    asked = asked_questions(1000, 5, real)
    assert asked == [named[0], real[0], named[1], real[1], named[2]]
    assert asked_questions(1000, 3, []) == entity_questions(1000, 3)
