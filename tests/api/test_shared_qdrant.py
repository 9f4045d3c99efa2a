"""Two warmrag instances on one Qdrant "server" (no server here: both get one
local-mode client in its place, as they would share a server's collection)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from api import stores
from api.config import Settings
from api.runtime import Runtime
from rag.knowledge.embedding import Embedder
from tests.api.test_vllm_faults import wait_for
from tests.conftest import Service
from tests.fakes import FakeEngine

SERVER = "http://qdrant.test:6333"  # never dialled: the client below stands in for it


class _SharedClient(QdrantClient):
    """One client for every instance; closing it is the fixture's job."""

    def close(self, grpc_grace: float | None = None, **kwargs: Any) -> None:
        pass


@pytest.fixture
def qdrant_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[QdrantClient]:
    client = _SharedClient(path=str(tmp_path / "server"))
    monkeypatch.setattr(stores, "qdrant_client", lambda settings: client)
    yield client
    QdrantClient.close(client)


def test_a_second_instance_on_the_collection_is_refused_writes_with_409(
    qdrant_server: QdrantClient,
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
    tmp_path: Path,
) -> None:
    first, _ = start_fake_service(
        qdrant_url=SERVER, instance_name="warmrag-a", data_dir=tmp_path / "a"
    )
    first.ingest({"id": "zorn", "text": "The river Zorn flows through Kellerby."})
    second, _ = start_fake_service(
        qdrant_url=SERVER, instance_name="warmrag-b", data_dir=tmp_path / "b"
    )
    resp = second.client.post(
        "/admin/documents",
        json={"documents": [{"id": "tea", "text": "Tea grows in Assam."}]},
        headers=second.admin(),
    )
    assert resp.status_code == 409
    assert "warmrag-a" in resp.json()["detail"] and "read-only" in resp.json()["detail"]
    assert second.client.delete("/admin/documents/zorn", headers=second.admin()).status_code == 409

    ready = second.client.get("/ready").json()
    assert ready["extra"]["qdrant"] == {"shared": True, "writer": False}
    assert ready["extra"]["documents"] == 1  # it sees what the writer wrote
    answer = second.chat("Which river flows through Kellerby?")
    assert answer["passages"][0]["doc_id"] == "zorn"
    assert first.client.get("/ready").json()["extra"]["qdrant"]["writer"] is True


def test_the_sample_kb_is_never_seeded_into_a_server_collection(
    qdrant_server: QdrantClient,
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
) -> None:
    service, _ = start_fake_service(qdrant_url=SERVER, seed_sample_kb=True)
    assert service.runtime.kb.document_ids() == []


def test_the_sample_kb_is_seeded_once_and_never_after_the_user_emptied_it(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
) -> None:
    service, _ = start_fake_service(seed_sample_kb=True)
    seeded = service.runtime.kb.document_ids()
    assert seeded
    for doc_id in seeded:
        resp = service.client.delete(f"/admin/documents/{doc_id}", headers=service.admin())
        assert resp.status_code == 200
    service.stop()
    again, _ = start_fake_service(seed_sample_kb=True)
    assert again.runtime.kb.document_ids() == []


def test_without_vllm_installed_or_a_url_ready_says_what_to_do(
    services: Any, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the vllm package cannot be found (a GPU host without the cpu extra)."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a),
    )
    service = services.start(wait_ready=False)
    wait_for(lambda: service.runtime.phase.value == "failed", what="start-up to fail")
    body = service.client.get("/ready").json()
    assert body["phase"] == "failed"
    assert "WARMRAG_VLLM_URL" in body["detail"] and "warmrag[cpu]" in body["detail"]


def test_the_child_gets_the_operators_extra_flags() -> None:
    runtime = Runtime(Settings(vllm_extra_args="--max-num-seqs 8 --swap-space '2'"))
    assert runtime.vllm_server is not None
    assert runtime.vllm_server.command()[-4:] == ["--max-num-seqs", "8", "--swap-space", "2"]
    with pytest.raises(ValueError, match="shell-quoted"):
        Settings(vllm_extra_args="--x 'unclosed")
