"""Admin document routes over HTTP: auth, validation, upsert semantics, restart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.conftest import ADMIN_TOKEN, Service, ServiceFactory
from tests.fakes import FakeEngine
from tests.rag.knowledge.test_readers import write_pdf

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


def upload(service: Service, path: str, data: bytes, admin: bool = True) -> httpx.Response:
    return service.client.post(
        "/admin/documents/files",
        params={"path": path},
        content=data,
        headers={**(service.admin() if admin else {}), "Content-Type": "application/octet-stream"},
    )


def test_files_are_read_as_the_cli_reads_them(fake_service: Service, tmp_path: Path) -> None:
    """The console's upload: one file per request, its type by suffix, its id its path."""
    markdown = upload(fake_service, "guide/zorn.md", b"# The Zorn\n\nThe river Zorn flows.")
    assert markdown.status_code == 200, markdown.text
    body = markdown.json()
    assert (body["path"], body["documents"], body["added"]) == (
        "guide/zorn.md",
        ["guide/zorn.md"],
        ["guide/zorn.md"],
    )
    again = upload(fake_service, "guide/zorn.md", b"# The Zorn\n\nThe river Zorn flows.")
    assert again.json()["unchanged"] == ["guide/zorn.md"]
    html = (
        b"<html><head><title>Kellerby</title><script>var x;</script></head>"
        b"<body><p>Kellerby is a town.</p></body></html>"
    )
    assert upload(fake_service, "kellerby.html", html).json()["added"] == ["kellerby.html"]
    pdf = write_pdf(tmp_path / "rye.pdf", "Rye grows in cold fields.", "Rye").read_bytes()
    assert upload(fake_service, "rye.pdf", pdf).json()["added"] == ["rye.pdf"]
    lines = b'{"id": "a", "text": "Alpha."}\n\n{"id": "b", "text": "Beta."}\n'
    assert upload(fake_service, "more.jsonl", lines).json()["documents"] == ["a", "b"]
    kb = fake_service.runtime.kb
    assert kb.document_ids() == sorted(["guide/zorn.md", "kellerby.html", "rye.pdf", "a", "b"])
    (chunk,) = kb.chunks("kellerby.html")
    assert "Kellerby is a town." in chunk.text and "var x" not in chunk.text


def test_bad_files_are_refused_naming_the_problem_and_store_nothing(
    fake_service: Service,
) -> None:
    kb = fake_service.runtime.kb
    cases = [
        ("notes.docx", b"PK\x03\x04", 415, "unsupported file type"),
        ("scan.pdf", b"not a pdf at all", 422, "not a readable PDF"),
        ("latin.txt", "caf\u00e9".encode("latin-1"), 422, "not UTF-8"),
        ("empty.md", b"   \n", 422, "empty.md: text: "),
        ("bad.jsonl", b'{"id": "a", "text": "Alpha."}\n{"id": "b"}\n', 422, "bad.jsonl:2"),
        (
            "twice.jsonl",
            b'{"id": "a", "text": "A."}\n{"id": "a", "text": "B."}\n',
            422,
            "duplicate",
        ),
    ]
    for path, data, code, needle in cases:
        resp = upload(fake_service, path, data)
        assert resp.status_code == code, (path, resp.text)
        assert needle in resp.json()["detail"], (path, resp.json())
    assert upload(fake_service, "ok.md", b"fine", admin=False).status_code == 401
    assert kb.document_ids() == []


def test_a_file_over_the_body_limit_is_413_and_stores_nothing(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
) -> None:
    service, _ = start_fake_service(max_request_bytes=2048)
    resp = upload(service, "big.md", b"The river Zorn flows. " * 200)
    assert resp.status_code == 413, resp.text
    assert service.runtime.kb.document_ids() == []
