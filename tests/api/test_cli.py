"""The ``warmrag`` CLI against a running service over HTTP.

The service is the whole app on real Qdrant, embedder, graph and warm registry, with
``FakeEngine`` in vLLM's place: the CLI's job is the HTTP conversation and what it
prints, which a real model does not change. Faults injected: the fake vLLM down, a
service address where nothing listens.
"""

from __future__ import annotations

import errno
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from api.cli import cache_line, main
from api.server import free_port
from rag.chat.results import CacheInfo, Timings, WarmState
from rag.knowledge.kvstore import SqliteKVStore
from tests.api.test_storage_faults import failing
from tests.conftest import ADMIN_TOKEN, Service, Services
from tests.fakes import FakeEngine

StartFake = Callable[..., tuple[Service, FakeEngine]]
DOC = {"id": "zorn", "text": "The river Zorn flows through the town of Kellerby."}


@pytest.fixture
def admin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARMRAG_ADMIN_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("COLUMNS", "200")  # rich tables: one line per row


#: What the service imports and a client of it must not: together 7-8 s of a command's
#: start (the embedding model's stack alone 4-5 s), where the client's own imports take 0.4 s.
SERVICE_STACK = (
    "torch",
    "sentence_transformers",
    "transformers",
    "onnxruntime",
    "llama_index.core",
    "qdrant_client",
    "spacy",
    "vllm",
)


def test_the_client_commands_do_not_import_the_service() -> None:
    """``warmrag --help``, ``ask``, ``status`` and ``ingest`` to a running service talk
    HTTP: the service's stack loads only for ``serve`` and the embedded commands."""
    code = f"import sys, api.cli; print(' '.join(m for m in {SERVICE_STACK!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("serve", "ingest", "delete", "warm", "status", "ask"):
        assert re.search(rf"\b{command}\b", out), command
    assert main(["ingest", "--help"]) == 0
    assert "--dry-run" in capsys.readouterr().out
    assert main(["no-such-command"]) == 2


def test_ingest_files_and_folders(
    fake_service: Service, tmp_path: Path, admin_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "zorn.md").write_text("# The Zorn\n\nThe river Zorn flows through Kellerby.\n")
    (folder / "notes.txt").write_text("Bread is baked from flour and water.\n")
    (folder / "ignored.docx").write_bytes(b"PK")  # not a supported kind: not read
    (folder / "page.html").write_text("<title>A page</title><p>Paper is made of wood.</p>")
    lines = [
        {"id": "mars", "text": "Mars has two moons.", "triples": [["Mars", "has", "two moons"]]},
        {"id": "tea", "text": "Green tea is steamed.", "metadata": {"k": "v"}},
        {"id": "salt", "text": "Salt is mined."},
    ]
    jsonl = tmp_path / "more.jsonl"
    jsonl.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    url = fake_service.url

    assert main(["ingest", str(folder), str(jsonl), "--url", url, "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "added 6, updated 0, unchanged 0" in out
    # one outcome per file: the .jsonl file's three documents (over two requests of
    # two), each .md/.txt file's one
    assert re.search(r"more\.jsonl\s.*\b3\b.*added 3", out), out
    assert re.search(r"zorn\.md\s.*added 1", out), out
    # a file's id is its path below the folder given, suffix included
    assert fake_service.runtime.kb.document_ids() == [
        "mars",
        "notes.txt",
        "page.html",
        "salt",
        "tea",
        "zorn.md",
    ]

    (folder / "notes.txt").write_text("Bread is baked from flour, water and salt.\n")
    assert main(["ingest", str(folder), str(jsonl), "--url", url]) == 0
    out = capsys.readouterr().out
    assert "added 0, updated 1, unchanged 5" in out
    assert re.search(r"notes\.txt\s.*updated 1", out), out


def test_dry_run_sends_nothing(
    fake_service: Service, tmp_path: Path, admin_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.md").write_text("# A\n\nAlpha.\n")
    assert main(["ingest", str(tmp_path), "--dry-run", "--url", fake_service.url]) == 0
    assert re.search(r"a\.md\s.*would send", capsys.readouterr().out)
    assert fake_service.runtime.kb.document_ids() == []


def test_an_invalid_file_stops_the_run_unless_keep_going(
    fake_service: Service, tmp_path: Path, admin_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good.md").write_text("# Good\n\nFine text.\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "ok", "text": "fine"}\n{"id": "bad\\tid", "text": "x"}\n')
    url = fake_service.url

    assert main(["ingest", str(tmp_path), "--url", url]) == 2
    captured = capsys.readouterr()
    assert "bad.jsonl:2" in captured.err and "nothing was sent" in captured.err
    assert re.search(r"good\.md\s.*not sent", captured.out)
    assert fake_service.runtime.kb.document_ids() == []

    # --keep-going: the valid file goes, the run still fails
    assert main(["ingest", str(tmp_path), "--url", url, "--keep-going"]) == 1
    captured = capsys.readouterr()
    assert re.search(r"good\.md\s.*added 1", captured.out)
    assert re.search(r"bad\.jsonl\s.*invalid", captured.out)
    assert fake_service.runtime.kb.document_ids() == ["good.md"]


def test_an_id_given_twice_in_a_file_is_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonl = tmp_path / "twice.jsonl"
    jsonl.write_text('{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n')
    assert main(["ingest", str(jsonl), "--dry-run"]) == 2
    assert "document id 'a' is given twice" in capsys.readouterr().err


def test_a_batch_the_service_refuses_stops_the_run_and_says_what_was_stored(
    start_fake_service: StartFake,
    tmp_path: Path,
    admin_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Fault injected: the service's body-size limit refuses the second request (413)."""
    service, _ = start_fake_service(max_request_bytes=4096)
    (tmp_path / "a.md").write_text("# A\n\nAlpha is small.\n")
    (tmp_path / "b.md").write_text("# B\n\n" + "Beta is large. " * 400)
    (tmp_path / "c.md").write_text("# C\n\nGamma is small.\n")
    args = ["ingest", str(tmp_path), "--url", service.url, "--batch-size", "1"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "HTTP 413" in captured.err and "WARMRAG_MAX_REQUEST_BYTES" in captured.err
    assert re.search(r"a\.md\s.*added 1", captured.out)
    assert re.search(r"b\.md\s.*failed", captured.out)
    assert re.search(r"c\.md\s.*not sent", captured.out)
    assert service.runtime.kb.document_ids() == ["a.md"]  # what was stored, nothing else


def test_a_missing_path_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ingest", str(tmp_path / "nowhere")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


@pytest.mark.parametrize("token", [None, "wrong"])
def test_token_problems_are_reported(
    fake_service: Service,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    token: str | None,
) -> None:
    if token:
        monkeypatch.setenv("WARMRAG_ADMIN_TOKEN", token)
    else:
        monkeypatch.delenv("WARMRAG_ADMIN_TOKEN", raising=False)
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    assert main(["ingest", str(doc), "--url", fake_service.url]) == 1
    err = capsys.readouterr().err
    assert ("WARMRAG_ADMIN_TOKEN" if token is None else "wrong admin token") in err
    assert fake_service.runtime.kb.document_ids() == []


def test_an_unreachable_service_is_reported(
    tmp_path: Path, admin_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fault injected: nothing listens at the URL given."""
    doc = tmp_path / "a.txt"
    doc.write_text("text")
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["ingest", str(doc), "--url", url]) == 1
    assert f"cannot reach warmrag at {url}" in capsys.readouterr().err
    assert main(["status", "--url", url]) == 1


def test_delete(fake_service: Service, admin_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    fake_service.ingest(DOC, {"id": "guide/install.md", "text": "Run make install."})
    url = fake_service.url
    assert main(["delete", "guide/install.md", "--url", url]) == 0
    assert re.search(r"guide/install\.md\s.*deleted", capsys.readouterr().out)
    assert fake_service.runtime.kb.document_ids() == ["zorn"]
    # an id that is not there: reported, the others still deleted, the run fails
    assert main(["delete", "nope", "zorn", "--url", url]) == 1
    out = capsys.readouterr().out
    assert re.search(r"nope\s.*no such document", out) and re.search(r"zorn\s.*deleted", out)
    assert fake_service.runtime.kb.document_ids() == []


def test_ask_warm_and_status(
    fake_service: Service, admin_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_service.ingest(DOC)
    url = fake_service.url
    question = "Which town does the river Zorn flow through?"

    assert main(["ask", question, "--url", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The answer is in the passages [1].")  # the fake's answer, streamed
    assert re.search(r"1\s.*zorn\s.*0\.\d{3}\s.*The river Zorn", out), out
    assert "cache   cold:" in out

    # The question is in the query log now: a cycle warms its prefix, then it hits.
    assert main(["warm", "--url", url]) == 0
    out = capsys.readouterr().out
    assert re.search(r"hot\s.*\b1\b", out), out
    assert fake_service.registry()["entries"], "the cycle warmed nothing"
    assert main(["ask", question, "--url", url]) == 0
    assert "cache   warm hit:" in capsys.readouterr().out

    assert main(["status", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "service    ready" in out
    assert "documents  1 (version 1)" in out
    assert "hit rate   50% of chats since start" in out
    assert re.search(r"registry   1 entries, \d+ of \d+ tokens warm", out), out
    assert "job        " in out


def test_ask_when_vllm_is_down(
    fake_service: Service, admin_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fault injected: the fake vLLM raises ``LLMUnavailableError``."""
    engine = fake_service.runtime.llm
    engine.down = True  # type: ignore[attr-defined]
    assert main(["ask", "Anything?", "--url", fake_service.url]) == 1
    assert "HTTP 503: vLLM is unavailable" in capsys.readouterr().err
    assert main(["status", "--url", fake_service.url]) == 1
    assert "vLLM is not answering" in capsys.readouterr().out


def test_embedded_ingest_and_delete_write_the_folder_the_service_then_serves(
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No service runs: the CLI opens the data folder's stores itself."""
    monkeypatch.setenv("WARMRAG_DATA_DIR", str(services.data_dir))
    monkeypatch.setenv("COLUMNS", "200")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "zorn.md").write_text("# The Zorn\n\nThe river Zorn flows through Kellerby.\n")
    (folder / "notes.txt").write_text("Bread is baked from flour and water.\n")
    mars = {"id": "mars", "text": "Mars has two moons.", "triples": [["Mars", "has", "two moons"]]}
    (folder / "more.jsonl").write_text(json.dumps(mars) + "\n")

    assert main(["ingest", "--embedded", str(folder)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"zorn\.md\s.*added 1", out) and "added 3" in out
    assert main(["delete", "--embedded", "notes.txt", "nope"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"notes\.txt\s.*deleted", out) and re.search(r"nope\s.*no such", out)
    assert main(["ingest", "--embedded", "--url", "http://x", str(folder)]) == 2
    assert "takes no --url" in capsys.readouterr().err

    service = services.start(llm=FakeEngine())  # the same data folder
    assert service.runtime.kb.document_ids() == ["mars", "zorn.md"]
    assert ["Mars", "has", "two moons"] in [
        [t.subject, t.predicate, t.object]
        for t in service.runtime.graph.triples_for_document("mars")
    ]
    answer = service.chat("Which town does the river Zorn flow through?")
    assert answer["passages"][0]["doc_id"] == "zorn.md"


def test_embedded_mode_refuses_a_folder_a_service_holds(
    fake_service: Service,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("WARMRAG_DATA_DIR", str(fake_service.settings.data_dir))
    fake_service.ingest(DOC)
    page = tmp_path / "bread.md"
    page.write_text("Bread is baked from flour and water.\n")
    assert main(["ingest", "--embedded", str(page)]) == 1
    err = capsys.readouterr().err
    assert f"cannot open {fake_service.settings.data_dir}" in err, err
    assert "drop --embedded" in err and "(the service, pid" in err
    assert fake_service.runtime.kb.document_ids() == ["zorn"]
    assert fake_service.chat("What is bread baked from?")["passages"][0]["doc_id"] == "zorn"


def test_a_full_disk_stops_an_embedded_ingest_and_stores_nothing(
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Fault injected: the state file's commit raises ENOSPC, as a full disk would."""
    monkeypatch.setenv("WARMRAG_DATA_DIR", str(services.data_dir))
    page = tmp_path / "zorn.md"
    page.write_text("The river Zorn flows through Kellerby.\n")
    with monkeypatch.context() as patch:
        patch.setattr(SqliteKVStore, "commit", failing(errno.ENOSPC))
        assert main(["ingest", "--embedded", str(page)]) == 1
    err = capsys.readouterr().err
    assert "ingest failed in" in err and "ENOSPC" in err, err
    service = services.start(llm=FakeEngine())  # the same folder: nothing was stored
    assert service.runtime.kb.document_ids() == []
    assert main(["ingest", "--embedded", str(page)]) == 1  # the service holds it now


def test_the_cache_line_tells_cached_by_vllm_from_warm_and_cold() -> None:
    timings = Timings(retrieval_ms=3.0, ttft_ms=65.2, total_ms=80.0)
    cached = CacheInfo(prompt_tokens=1168, cached_tokens=1152, prefix_tokens=1152)
    assert cache_line(cached, timings) == (
        "cache   cached by vLLM: 1152 of 1168 prompt tokens cached; first token after 65 ms"
    )
    cold = CacheInfo(prompt_tokens=1168, cached_tokens=128, prefix_tokens=1152)
    assert cache_line(cold, timings).startswith("cache   cold: 128 of 1168")
    evicted = cold.model_copy(update={"warm_state": WarmState.EVICTED})
    assert cache_line(evicted, timings).startswith("cache   cold (warm prefix evicted):")
    warm = cached.model_copy(update={"warm_state": WarmState.HIT})
    assert cache_line(warm, timings).startswith("cache   warm hit: 1152 of 1168")
