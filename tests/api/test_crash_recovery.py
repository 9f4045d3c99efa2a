"""A write killed with SIGKILL at every step leaves stores that agree after a restart,
and sending the same request again converges.

Fault injected: ``WARMRAG_FAULT_KILL_AT`` makes a forked child (``crash_child.main``)
SIGKILL itself at one named point of an ingest or a delete (``rag.knowledge.faults``): no
rollback, no ``finally``, no flush. The child is forked from the test process, so it
starts with the embedding model already loaded (a fresh interpreter per case would
spend most of the test importing). The real embedded vector index, docstore, graph, warm
registry and embedder; a fake engine in vLLM's place (what is checked is on disk).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from api.runtime import Runtime
from rag.knowledge.embedding import Embedder, shared_embedder
from rag.knowledge.faults import DELETE_POINTS, INGEST_POINTS
from rag.knowledge.ingest import DOC_HASH_KEY, document_hash
from rag.knowledge.models import DEFAULT_CHUNKING
from rag.knowledge.passages import text_hash
from tests.api import crash_child
from tests.api.crash_child import QUESTION, ZORN_V1, ZORN_V2, settings
from tests.fakes import FakeEngine

BEFORE_COMMIT = ("ingest.embedded", "ingest.vectors_added")
CASES = [("update", p) for p in INGEST_POINTS] + [("delete", p) for p in DELETE_POINTS]


def crash(data_dir: Path, op: str, point: str, timeout_s: float = 300.0) -> None:
    pid = os.fork()
    if pid == 0:  # the child: run the write until the checkpoint kills it
        code = 0
        try:
            asyncio.run(crash_child.main(data_dir, op, point))
        except BaseException:
            code = 3
        os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"the write did not reach {point} in {timeout_s:.0f} s")
        time.sleep(0.05)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the child was not killed at {point} (exit status {status})"
    )


async def reopen(data_dir: Path) -> Runtime:
    runtime = Runtime(settings(data_dir), embedder=shared_embedder(), llm=FakeEngine())
    await runtime.open()
    assert runtime.warmup is not None
    await runtime.warmup.start()  # the restart: registry checked, then restored
    return runtime


def assert_consistent(runtime: Runtime) -> None:
    """Qdrant, the docstore, the graph and the warm registry describe the same documents."""
    kb = runtime.kb
    docs = kb.document_ids()
    by_doc: dict[str, set[str]] = {}
    for point_id, payload in kb.index.payloads(["doc_id", DOC_HASH_KEY]):
        doc_id = str(payload.get("doc_id"))
        assert doc_id in docs, f"chunk of unknown document {doc_id!r} in the vector index"
        assert payload.get(DOC_HASH_KEY) == kb.document_hash(doc_id), "chunk of an old version"
        by_doc.setdefault(doc_id, set()).add(point_id)
    for doc_id in docs:
        assert by_doc.get(doc_id, set()) == set(kb.chunk_ids(doc_id)), doc_id

    with_triples = sorted(d for d in docs if kb.supplied_triples(d))
    assert runtime.graph.document_ids() == with_triples
    for doc_id in with_triples:
        graph_triples = [
            [t.subject, t.predicate, t.object] for t in runtime.graph.triples_for_document(doc_id)
        ]
        assert graph_triples == kb.supplied_triples(doc_id)

    current = {cid: text_hash(text) for d in docs for cid, text in kb.chunk_texts(d)}
    assert runtime.warmup is not None
    for entry in runtime.warmup.registry.entries():
        for chunk_id, content in zip(entry.chunk_ids, entry.content_hashes, strict=True):
            assert current.get(chunk_id) == content, "warm entry built from text no longer in KB"
    for passage in runtime.retriever.retrieve(QUESTION, 3).passages:
        assert current.get(passage.chunk_id) == passage.content_hash


async def recover_and_resend(data_dir: Path, op: str, point: str) -> None:
    runtime = await reopen(data_dir)
    try:
        assert_consistent(runtime)
        if point in BEFORE_COMMIT:  # nothing changed: the warm entry is still there
            assert runtime.warmup is not None
            entries = runtime.warmup.registry.entries()
            assert len(entries) == 1 and ZORN_V1.id in entries[0].doc_ids
        await crash_child.send(runtime, op)  # the same request again
        assert runtime.warmup is not None
        await runtime.warmup.run_cycle()
        assert_consistent(runtime)
        texts = " ".join(p.text for p in runtime.retriever.retrieve(QUESTION, 3).passages)
        assert ZORN_V1.text not in texts  # the old text is gone in both operations
        if op == "update":
            assert kb_hash_matches(runtime, ZORN_V2.id)
            assert ZORN_V2.text in texts
        else:
            assert ZORN_V1.id not in runtime.kb.document_ids()
            assert ZORN_V1.id not in runtime.graph.document_ids()
    finally:
        await runtime.stop()


def kb_hash_matches(runtime: Runtime, doc_id: str) -> bool:
    return runtime.kb.document_hash(doc_id) == document_hash(ZORN_V2, DEFAULT_CHUNKING)


@pytest.mark.parametrize(("op", "point"), CASES)
def test_killed_write_recovers_and_converges(
    embedder: Embedder, tmp_path: Path, op: str, point: str
) -> None:
    embedder.warm_up()  # loaded before the fork: the child inherits it
    data_dir = tmp_path / "data"
    crash(data_dir, op, point)
    asyncio.run(recover_and_resend(data_dir, op, point))
