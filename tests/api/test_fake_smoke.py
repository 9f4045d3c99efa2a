"""The whole app over HTTP with a fake engine in vLLM's place (no vLLM server)."""

from __future__ import annotations

from tests.conftest import Service


def test_chat_ingest_delete_on_fake_engine(fake_service: Service) -> None:
    fake_service.ingest({"id": "zorn", "text": "The river Zorn flows through Kellerby."})
    body = fake_service.chat("Where does the Zorn flow?")
    assert body["passages"][0]["doc_id"] == "zorn"
    assert body["answer"]
    resp = fake_service.client.delete("/admin/documents/zorn", headers=fake_service.admin())
    assert resp.status_code == 200
    assert fake_service.chat("Where does the Zorn flow?")["passages"] == []
