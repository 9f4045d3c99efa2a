"""``python -m api ingest`` against a running service over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.cli import main
from tests.conftest import ADMIN_TOKEN, Service


def test_ingest_files_and_folders(service: Service, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WARMRAG_ADMIN_TOKEN", ADMIN_TOKEN)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "zorn.md").write_text("# The Zorn\n\nThe river Zorn flows through Kellerby.\n")
    (folder / "notes.txt").write_text("Bread is baked from flour and water.\n")
    (folder / "ignored.pdf").write_bytes(b"%PDF")
    lines = [
        {"id": "mars", "text": "Mars has two moons.", "triples": [["Mars", "has", "two moons"]]},
        {"id": "tea", "text": "Green tea is steamed.", "metadata": {"k": "v"}},
    ]
    jsonl = tmp_path / "more.jsonl"
    jsonl.write_text("\n".join(json.dumps(line) for line in lines) + "\n")

    assert main(["ingest", str(folder), str(jsonl), "--url", service.url, "--batch-size", "3"]) == 0
    assert "added 4, updated 0, unchanged 0" in capsys.readouterr().out
    # a file's id is its path below the folder given, suffix included
    assert service.runtime.kb.document_ids() == ["mars", "notes.txt", "tea", "zorn.md"]
    assert main(["ingest", str(folder), str(jsonl), "--url", service.url]) == 0
    assert "added 0, updated 0, unchanged 4" in capsys.readouterr().out


def test_a_bad_line_sends_nothing(service: Service, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WARMRAG_ADMIN_TOKEN", ADMIN_TOKEN)
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"id": "ok", "text": "fine"}\n{"id": "bad\\tid", "text": "x"}\n')
    assert main(["ingest", str(jsonl), "--url", service.url]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    assert service.runtime.kb.document_ids() == []


@pytest.mark.parametrize("token", [None, "wrong"])
def test_token_problems_are_reported(
    service: Service, tmp_path: Path, monkeypatch, capsys, token: str | None
) -> None:
    if token:
        monkeypatch.setenv("WARMRAG_ADMIN_TOKEN", token)
    else:
        monkeypatch.delenv("WARMRAG_ADMIN_TOKEN", raising=False)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    assert main(["ingest", str(doc), "--url", service.url]) != 0
    assert "error" in capsys.readouterr().err
