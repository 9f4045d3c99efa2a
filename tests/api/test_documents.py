"""Admin document routes over HTTP: auth, validation, upsert semantics, restart."""

from __future__ import annotations

from tests.conftest import ADMIN_TOKEN, Service, ServiceFactory

DOC = {
    "id": "zorn",
    "text": "The river Zorn flows through the town of Kellerby.",
    "metadata": {"k": 1},
}


def test_admin_refuses_without_configured_token(start_service: ServiceFactory) -> None:
    service = start_service(admin_token=None)
    resp = service.client.post(
        "/admin/documents", json={"documents": [DOC]}, headers={"Authorization": "Bearer x"}
    )
    assert resp.status_code == 403
    assert "WARMRAG_ADMIN_TOKEN" in resp.json()["detail"]
    assert service.runtime.kb.document_ids() == []


def test_admin_token_missing_or_wrong_is_401(service: Service) -> None:
    body = {"documents": [DOC]}
    assert service.client.post("/admin/documents", json=body).status_code == 401
    wrong = service.client.post(
        "/admin/documents", json=body, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    assert service.client.delete("/admin/documents/zorn").status_code == 401
    assert service.runtime.kb.document_ids() == []
    ok = service.client.post(
        "/admin/documents", json=body, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    assert ok.status_code == 200


def test_bad_documents_are_422_and_store_nothing(service: Service) -> None:
    service.ingest(DOC)
    version = service.runtime.kb.version
    bad_bodies = [
        {"documents": []},
        {"documents": [{"id": "a", "text": "   "}]},
        {"documents": [{"id": "has\ttab", "text": "x"}]},
        {"documents": [{"id": " leading-space", "text": "x"}]},
        {"documents": [{"id": "ok", "text": "fine"}, {"id": "ok", "text": "dupe"}]},
        {
            "documents": [
                {"id": "ok", "text": "fine"},
                {"id": "t", "text": "x", "triples": [["a", "b"]]},
            ]
        },
        {"documents": [{"id": "m", "text": "x", "metadata": {"big": "y" * 5000}}]},
        {"nothing": 1},
    ]
    for body in bad_bodies:
        resp = service.client.post("/admin/documents", json=body, headers=service.admin())
        assert resp.status_code == 422, (body, resp.text)
        assert resp.json()["detail"]
    resp = service.client.post(
        "/admin/documents",
        content=b"{not json",
        headers={**service.admin(), "content-type": "application/json"},
    )
    assert resp.status_code == 422
    assert service.runtime.kb.document_ids() == ["zorn"]
    assert service.runtime.kb.version == version


def test_upsert_semantics_over_http(service: Service) -> None:
    first = service.ingest(DOC)
    assert first == {"added": ["zorn"], "updated": [], "unchanged": [], "kb_version": 1}
    embedded = service.runtime.embedder.texts_embedded
    again = service.ingest(DOC)
    assert again == {"added": [], "updated": [], "unchanged": ["zorn"], "kb_version": 1}
    assert service.runtime.embedder.texts_embedded == embedded, "an unchanged document was embedded"

    changed = service.ingest(
        {"id": "zorn", "text": "The river Zorn was renamed the Vessa in 1990."}
    )
    assert changed["updated"] == ["zorn"] and changed["kb_version"] == 2
    answer = service.chat("Which town does the river Zorn flow through?")
    assert all("Kellerby" not in p["text"] for p in answer["passages"])
    assert any("Vessa" in p["text"] for p in answer["passages"])


def test_delete(service: Service) -> None:
    service.ingest(DOC, {"id": "other", "text": "Bread is baked from flour, water and yeast."})
    resp = service.client.delete("/admin/documents/zorn", headers=service.admin())
    assert resp.status_code == 200
    assert resp.json()["deleted"] == "zorn" and resp.json()["removed_chunks"] == 1
    answer = service.chat("Which town does the river Zorn flow through?")
    assert [p["doc_id"] for p in answer["passages"]] == ["other"]
    missing = service.client.delete("/admin/documents/zorn", headers=service.admin())
    assert missing.status_code == 404 and "zorn" in missing.json()["detail"]


def test_restart_keeps_the_knowledge_base(start_service: ServiceFactory) -> None:
    first = start_service()
    first.ingest(DOC)
    first.stop()
    second = start_service()
    assert second.runtime.kb.version == 1
    answer = second.chat("Where does the Zorn flow?")
    assert answer["passages"][0]["doc_id"] == "zorn"
    assert second.ingest(DOC)["unchanged"] == ["zorn"]
