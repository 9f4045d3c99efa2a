"""Document ids people use (paths, anchors, spaces, URLs, any script) through every route
that takes one, and through the CLI, which derives ids from file paths. FakeEngine stands in
for vLLM: only retrieval and storage matter here."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest

from api.cli import main
from rag.knowledge.files import load_sample_documents
from tests.conftest import ADMIN_TOKEN, Service

IDS = [
    "guide/install.md",
    "faq/general#q3",
    "a b",
    "../../etc/passwd",
    "ünïcødé/文档",
    "https://example.com/docs?page=2&path=a%2Fb",
    "x/triples",  # the suffix of the triples route, as part of an id
    "%2F",
]


def url_id(doc_id: str) -> str:
    return quote(doc_id, safe="")


def test_printable_ids_work_through_every_route(fake_service: Service) -> None:
    service = fake_service
    service.ingest({"id": "plain", "text": "Bread is baked from flour and water."})
    data_dir = service.settings.data_dir
    files_before = {p.relative_to(data_dir) for p in data_dir.rglob("*")}
    docs = [
        {"id": doc_id, "text": f"Marie Curie wrote note {i} in Warsaw.", "metadata": {"i": i}}
        for i, doc_id in enumerate(IDS)
    ]
    assert sorted(service.ingest(*docs)["added"]) == sorted(IDS)
    listed = service.client.get("/admin/documents", headers=service.admin()).json()
    assert sorted(listed["documents"]) == sorted([*IDS, "plain"])

    answer = service.chat("What did Marie Curie write in Warsaw?", top_k=10)
    assert {p["doc_id"] for p in answer["passages"]} >= set(IDS)

    for doc_id in IDS:
        resp = service.client.get(
            f"/admin/kg/documents/{url_id(doc_id)}/triples", headers=service.admin()
        )
        assert resp.status_code == 200, (doc_id, resp.text)
        assert resp.json()["doc_id"] == doc_id

    # Ids are hashed or stored as data, never made into file names.
    files_after = {p.relative_to(data_dir) for p in data_dir.rglob("*")}
    new_files = {str(p) for p in files_after - files_before}
    assert not any(part in f for f in new_files for part in ("passwd", "install", "文档", "q3")), (
        new_files
    )
    assert not (data_dir / "../../etc/passwd").resolve().exists()

    for doc_id in IDS:
        resp = service.client.delete(f"/admin/documents/{url_id(doc_id)}", headers=service.admin())
        assert resp.status_code == 200, (doc_id, resp.text)
        assert resp.json()["deleted"] == doc_id
    assert service.runtime.kb.document_ids() == ["plain"]


def test_unencoded_slashes_in_path_routes(fake_service: Service) -> None:
    service = fake_service
    service.ingest({"id": "guide/install.md", "text": "Run make to install it."})
    resp = service.client.get(
        "/admin/kg/documents/guide/install.md/triples", headers=service.admin()
    )
    assert resp.status_code == 200 and resp.json()["doc_id"] == "guide/install.md"
    missing = service.client.delete("/admin/documents/guide/other.md", headers=service.admin())
    assert missing.status_code == 404 and "guide/other.md" in missing.json()["detail"]
    resp = service.client.delete("/admin/documents/guide/install.md", headers=service.admin())
    assert resp.status_code == 200 and resp.json()["deleted"] == "guide/install.md"


@pytest.mark.parametrize("raw", ["a%09b", "%20lead", "trail%20", "a%E2%80%8Bb", "a%0Ab"])
def test_bad_ids_in_paths_are_422(fake_service: Service, raw: str) -> None:
    for resp in (
        fake_service.client.delete(f"/admin/documents/{raw}", headers=fake_service.admin()),
        fake_service.client.get(f"/admin/kg/documents/{raw}/triples", headers=fake_service.admin()),
    ):
        assert resp.status_code == 422, (raw, resp.text)
        assert "doc_id" in resp.text


def test_cli_ids_are_paths_relative_to_the_folder_given(
    fake_service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("WARMRAG_ADMIN_TOKEN", ADMIN_TOKEN)
    root = tmp_path / "kb"
    for rel, text in {
        "guide/install.md": "# Install\n\nRun make.\n",
        "a/notes.md": "Notes about apples.\n",
        "b/notes.md": "Notes about bananas.\n",
        "b/notes.txt": "Plain notes about bananas.\n",
        "deep/er/still/faq.txt": "Questions and answers.\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    jsonl = tmp_path / "more.jsonl"
    jsonl.write_text(json.dumps({"id": "faq/general#q3", "text": "Answer three."}) + "\n")

    assert main(["ingest", str(root), str(jsonl), "--url", fake_service.url]) == 0
    assert "added 6, updated 0, unchanged 0" in capsys.readouterr().out
    assert fake_service.runtime.kb.document_ids() == [
        "a/notes.md",
        "b/notes.md",
        "b/notes.txt",
        "deep/er/still/faq.txt",
        "faq/general#q3",
        "guide/install.md",
    ]
    kb = fake_service.runtime.kb
    assert kb.chunk_texts("a/notes.md")[0][1] != kb.chunk_texts("b/notes.md")[0][1]

    # A single file's id is its name; two roots that both hold notes.md would collide.
    version = kb.version
    assert main(["ingest", str(root / "a"), str(root / "b"), "--url", fake_service.url]) == 2
    err = capsys.readouterr().err
    assert "'notes.md'" in err and "common folder" in err
    assert kb.version == version


def test_sample_kb_ids_are_file_names() -> None:
    ids = [doc.id for doc in load_sample_documents()]
    assert "marie-curie.md" in ids and len(ids) == len(set(ids)) == 8
