"""A full or read-only data folder: ingest and delete answer 507/503 naming the
problem, nothing is half-written, and chats keep answering.

Faults injected: the state file's commit (``SqliteKVStore.commit``) or the vector
index's insert raises ``OSError`` with ENOSPC, EROFS or EACCES, as the file system would
(SQLite's own "full" is turned into ENOSPC: ``tests/rag/knowledge/test_state.py``). A
real full disk cannot be made here without privileges a test should not need. Real
vector index, state file, graph and embedder; a fake engine in vLLM's place.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from rag.knowledge.edge import EdgeIndex
from rag.knowledge.kvstore import SqliteKVStore
from tests.conftest import Service
from tests.fakes import FakeEngine

ZORN = {"id": "zorn", "text": "The river Zorn flows through Kellerby."}
ASTER = {"id": "aster", "text": "Aster Bridge crosses the Zorn in Kellerby."}


def failing(code: int) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, "injected: " + errno.errorcode[code])

    return fail


def snapshot(service: Service) -> tuple[Any, ...]:
    docs = service.client.get("/admin/documents", headers=service.admin()).json()
    kb = service.runtime.kb
    return (
        docs["documents"],
        docs["kb_version"],
        kb.count_chunks(),
        service.runtime.graph.edge_count,
    )


@pytest.mark.parametrize(
    ("target", "code", "status", "problem"),
    [
        ("docstore", errno.ENOSPC, 507, "the data folder is full"),
        ("docstore", errno.EROFS, 503, "the data folder is not writable"),
        ("qdrant", errno.ENOSPC, 507, "the data folder is full"),
        ("qdrant", errno.EACCES, 503, "the data folder is not writable"),
    ],
)
def test_storage_failure_changes_nothing_and_chats_go_on(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
    monkeypatch: pytest.MonkeyPatch,
    target: str,
    code: int,
    status: int,
    problem: str,
) -> None:
    service, _ = start_fake_service()
    service.ingest(ZORN)
    before = snapshot(service)
    with monkeypatch.context() as patch:
        if target == "docstore":
            patch.setattr(SqliteKVStore, "commit", failing(code))
        else:
            patch.setattr(type(service.runtime.kb.index), "add", failing(code))
        for request in (
            lambda: service.client.post(
                "/admin/documents", json={"documents": [ASTER]}, headers=service.admin()
            ),
            lambda: service.client.post(
                "/admin/documents",
                json={"documents": [{**ZORN, "text": "The Zorn is purple now."}]},
                headers=service.admin(),
            ),
            lambda: service.client.post(  # the console's file upload
                "/admin/documents/files",
                params={"path": "aster.md"},
                content=ASTER["text"].encode(),
                headers={**service.admin(), "Content-Type": "application/octet-stream"},
            ),
        ):
            resp = request()
            assert resp.status_code == status, resp.text
            body = resp.json()
            assert body["detail"] == f"{problem}; nothing was changed"
            assert body["component"] == "storage" and body["request_id"]
            assert snapshot(service) == before
        if target == "docstore":
            deleted = service.client.delete("/admin/documents/zorn", headers=service.admin())
            assert deleted.status_code == status
            assert snapshot(service) == before
        # Reads and chats need no writes: they go on, with the old text.
        body = service.chat("Where does the Zorn flow?")
        assert "Kellerby" in body["passages"][0]["text"]
    # The disk has room again: the same request now succeeds.
    assert service.ingest(ASTER)["added"] == ["aster"]
    assert service.chat("What crosses the Zorn?")["passages"]


def test_failed_chunk_removal_never_leaves_deleted_text_retrievable(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fault injected: the vector index's delete fails after the docstore committed a
    delete (and a replace). The text must not be retrievable nor its triples injected meanwhile;
    the next write removes the orphaned chunks."""
    service, _ = start_fake_service()
    service.ingest(
        {**ZORN, "triples": [["Zorn", "flows through", "Kellerby"]]},
        {**ASTER, "triples": [["Aster Bridge", "crosses", "Zorn"]]},
    )
    chunks_before = service.runtime.kb.count_chunks()
    with monkeypatch.context() as patch:
        # The clean-up and the reconcile retry both go through the index's delete.
        patch.setattr(type(service.runtime.kb.index), "delete", failing(errno.EIO))
        resp = service.client.delete("/admin/documents/zorn", headers=service.admin())
        assert resp.status_code == 200  # committed: the clean-up is retried later
        assert service.runtime.kb.count_chunks() == chunks_before  # the orphan is still there
        body = service.chat("Where does the Zorn flow through Kellerby?")
        assert all(p["doc_id"] != "zorn" for p in body["passages"])
        assert ["Zorn", "flows through", "Kellerby"] not in body["triples"]
        subgraph = service.client.get(
            "/admin/kg/subgraph", params={"question": "Zorn Kellerby"}, headers=service.admin()
        ).json()
        assert all(t["doc_id"] != "zorn" for t in subgraph["triples"])
    service.ingest({"id": "other", "text": "Copper conducts electricity."})
    assert service.runtime.kb.count_chunks() == chunks_before  # zorn's chunk out, other's in
    assert not service.runtime.kb.needs_reconcile


def test_a_killed_index_process_is_a_503_once_and_chats_go_on(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
) -> None:
    """Fault injected: the embedded index's process is killed (SIGKILL) between chats."""
    service, _ = start_fake_service()
    service.ingest(ZORN)
    index = service.runtime.kb.index
    assert isinstance(index, EdgeIndex)
    os.kill(index._call(os.getpid), signal.SIGKILL)
    resp = service.client.post("/v1/chat", json={"question": "Where does the Zorn flow?"})
    assert resp.status_code == 503, resp.text
    assert resp.json()["detail"] == "the vector index restarted; try again"
    assert resp.headers["Retry-After"]
    assert service.chat("Where does the Zorn flow?")["passages"][0]["doc_id"] == "zorn"
