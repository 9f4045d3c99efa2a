"""Bad input over HTTP: each gets a 4xx whose detail names the problem, and nothing stored
changes (documents, knowledge-base version, graph) and nothing reaches the model.

The app runs whole, over real HTTP, with ``FakeEngine`` in vLLM's place: what is tested
here is refused before a model would be asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import Service, error_body
from tests.fakes import FakeEngine

DOC = {"id": "zorn", "text": "The river Zorn flows through the town of Kellerby."}
JSON = {"content-type": "application/json"}


@pytest.fixture
def served(start_fake_service: Callable[..., tuple[Service, FakeEngine]]) -> Service:
    service, _ = start_fake_service(max_request_bytes=64 * 1024)
    service.ingest(DOC)
    return service


def state(service: Service) -> tuple[int, list[str], int, int]:
    runtime = service.runtime
    engine = runtime.llm
    assert isinstance(engine, FakeEngine)
    return (
        runtime.kb.version,
        runtime.kb.document_ids(),
        runtime.graph.edge_count,
        len(engine.chats),
    )


def post_raw(service: Service, path: str, raw: str | bytes, **headers: str) -> Any:
    return service.client.post(path, content=raw, headers={**service.admin(), **JSON, **headers})


def assert_refused(resp: Any, status: int, *needles: str) -> None:
    assert resp.status_code == status, resp.text
    body = error_body(resp)
    detail = json.dumps(body["detail"], ensure_ascii=False)
    for needle in needles:
        assert needle in detail, (needle, detail)
    if isinstance(body["detail"], list):
        assert all(set(issue) == {"type", "loc", "msg"} for issue in body["detail"]), body
    assert resp.headers["x-request-id"]


@pytest.fixture
def unchanged(served: Service) -> Iterator[Service]:
    before = state(served)
    yield served
    assert state(served) == before, "a refused request changed what is stored"
    assert served.runtime.kb.document_ids() == ["zorn"]


def doc_body(**fields: str) -> str:
    """An ingest body with raw JSON fragments for the document's fields."""
    items = {"id": '"new"', "text": '"Some text."', **fields}
    inner = ", ".join(f'"{key}": {value}' for key, value in items.items())
    return f'{{"documents": [{{{inner}}}]}}'


def test_nan_infinity_and_out_of_range_numbers(unchanged: Service) -> None:
    service = unchanged
    for raw, needle in (
        (doc_body(metadata='{"score": NaN}'), "NaN is not valid JSON"),
        (doc_body(metadata='{"score": Infinity}'), "Infinity is not valid JSON"),
        (doc_body(metadata='{"score": -Infinity}'), "-Infinity is not valid JSON"),
        (doc_body(metadata='{"score": 1e999}'), "out of range"),
        (doc_body(metadata='{"n": ' + "9" * 5000 + "}"), "invalid JSON"),
        (doc_body(metadata='{"n": 18446744073709551616}'), "64-bit"),
    ):
        assert_refused(post_raw(service, "/admin/documents", raw), 422, needle)
    for raw in ('{"question": "q", "top_k": NaN}', '{"question": "q", "top_k": Infinity}'):
        assert_refused(post_raw(service, "/v1/chat", raw), 422, "not valid JSON")


LONE = '"\\ud800"'
LONE_IN = '"a\\udfffb"'


def test_lone_surrogates_anywhere(unchanged: Service) -> None:
    service = unchanged
    cases = [
        ("/admin/documents", doc_body(id=LONE), '"documents", 0, "id"'),
        ("/admin/documents", doc_body(text=LONE_IN), '"documents", 0, "text"'),
        ("/admin/documents", doc_body(metadata=f'{{"k": {LONE}}}'), '"metadata", "k"'),
        ("/admin/documents", doc_body(metadata=f'{{"k": [1, {LONE}]}}'), '"k", 1'),
        ("/admin/documents", doc_body(metadata=f"{{{LONE}: 1}}"), "key contains"),
        ("/admin/documents", doc_body(triples=f'[["a", "b", {LONE}]]'), '"triples", 0, 2'),
        ("/v1/chat", f'{{"question": {LONE_IN}}}', '"question"'),
        (
            "/v1/chat/completions",
            f'{{"messages": [{{"role": "user", "content": {LONE}}}]}}',
            '"messages", 0, "content"',
        ),
        ("/admin/warmup/queries", f'{{"queries": ["ok", {LONE}]}}', '"queries", 1'),
    ]
    for path, raw, where in cases:
        resp = post_raw(service, path, raw)
        assert_refused(resp, 422, "lone surrogate U+D", where)


def test_nul_characters(unchanged: Service) -> None:
    service = unchanged
    nul = '"a\\u0000b"'
    for path, raw in (
        ("/admin/documents", doc_body(text=nul)),
        ("/admin/documents", doc_body(id=nul)),
        ("/admin/documents", doc_body(metadata=f'{{"k": {nul}}}')),
        ("/v1/chat", f'{{"question": {nul}}}'),
        ("/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": {nul}}}]}}'),
    ):
        assert_refused(post_raw(service, path, raw), 422, "NUL character (U+0000) at position 1")
    # from the URL: a question in a query string, an id in a path
    resp = service.client.get(
        "/admin/kg/subgraph", params={"question": "a\x00b"}, headers=service.admin()
    )
    assert_refused(resp, 422, "NUL")
    resp = service.client.delete("/admin/documents/zo%00rn", headers=service.admin())
    assert_refused(resp, 422, "unprintable character U+0000")


def test_wrong_types(unchanged: Service) -> None:
    service = unchanged
    docs = "/admin/documents"
    for path, body, where in (
        (docs, {"documents": "zorn"}, '"documents"'),
        (docs, {"documents": [{"id": 5, "text": "x"}]}, '"id"'),
        (docs, {"documents": [{"id": "a", "text": ["x"]}]}, '"text"'),
        (docs, {"documents": [{"id": "a", "text": "x", "metadata": []}]}, '"metadata"'),
        (docs, {"documents": [{"id": "a", "text": "x", "triples": "a b c"}]}, '"triples"'),
        (docs, {"documents": [{"id": "a", "text": "x", "metadata": {"markup": "md"}}]}, "'md'"),
        (docs, {"documents": [{"id": "a", "text": "x", "metadata": {"markup": {}}}]}, "markup"),
        (docs, [DOC], '"body"'),
        ("/v1/chat", {"question": 42}, '"question"'),
        ("/v1/chat", {"question": "q", "top_k": "3"}, '"top_k"'),
        ("/v1/chat", {"question": "q", "top_k": 2.5}, '"top_k"'),
        ("/v1/chat", {"question": "q", "top_k": True}, '"top_k"'),
        ("/v1/chat", {"question": "q", "stream": "yes"}, '"stream"'),
        ("/v1/chat/completions", {"messages": "hello"}, '"messages"'),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, '"content"'),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": None}]}, '"content"'),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 7}]}, '"content"'),
        ("/admin/warmup/queries", {"queries": [1, 2]}, '"queries", 0'),
    ):
        resp = service.client.post(path, json=body, headers=service.admin())
        assert_refused(resp, 422, where)
    # not JSON at all, not UTF-8, not declared as JSON
    assert_refused(post_raw(service, docs, b"{not json"), 422, "invalid JSON")
    assert_refused(post_raw(service, docs, b'{"documents": "\xff"}'), 422, "not UTF-8")
    resp = post_raw(
        service, docs, json.dumps({"documents": [DOC]}), **{"content-type": "text/plain"}
    )
    assert_refused(resp, 422)


def test_deep_nesting(unchanged: Service) -> None:
    service = unchanged
    deep = "[" * 40 + "]" * 40
    assert_refused(
        post_raw(service, "/admin/documents", doc_body(metadata=f'{{"k": {deep}}}')),
        422,
        "nested more than 32",
    )
    very_deep = "[" * 20_000 + "]" * 20_000
    assert_refused(post_raw(service, "/admin/documents", very_deep), 422, "nested")


def test_request_size_limit_is_413_before_parsing(unchanged: Service) -> None:
    service = unchanged
    big = json.dumps({"documents": [{"id": "big", "text": "word " * 20_000}]})  # ~100 KB
    assert len(big) > service.settings.max_request_bytes
    resp = post_raw(service, "/admin/documents", big)
    assert_refused(resp, 413, "WARMRAG_MAX_REQUEST_BYTES")

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        data = big.encode()
        for start in range(0, len(data), 8192):
            yield data[start : start + 8192]

    resp = service.client.post(
        "/admin/documents", content=chunked(), headers={**service.admin(), **JSON}
    )
    assert_refused(resp, 413, "WARMRAG_MAX_REQUEST_BYTES")
    # the limit is on bytes, not on JSON: NaN in a too-large body is still a 413
    resp = post_raw(service, "/v1/chat", '{"question": NaN, "pad": "' + "x" * 70_000 + '"}')
    assert resp.status_code == 413


def test_too_many_or_too_long(unchanged: Service) -> None:
    service = unchanged
    docs = "/admin/documents"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"documents": [{"id": f"d{i}", "text": "x"} for i in range(1001)]}, "at most 1000"),
        ({"documents": []}, "at least 1"),
        (
            {"documents": [{"id": "m", "text": "x", "metadata": {"big": "y" * 5000}}]},
            "at most 4000",
        ),
        ({"documents": [{"id": "i" * 513, "text": "x"}]}, "at most 512"),
        ({"documents": [{"id": "t", "text": "x", "triples": [["a", "b", "c"]] * 1001}]}, "1000"),
        ({"documents": [{"id": "t", "text": "x", "triples": [["a", "b", "c" * 201]]}]}, "200"),
        ({"documents": [{"id": "blank", "text": " \n "}]}, "text is blank"),
    ]
    for body, needle in cases:
        assert_refused(service.client.post(docs, json=body, headers=service.admin()), 422, needle)
    for body in (
        {"question": "x" * 2001},
        {"question": " "},
        {"question": ""},
    ):
        assert_refused(service.client.post("/v1/chat", json=body), 422, '"question"')


def test_over_long_text_within_the_size_limit(fake_service: Service) -> None:
    service = fake_service
    assert service.settings.max_request_bytes == 16 * 1024 * 1024  # the default
    body = {"documents": [{"id": "long", "text": "x" * 1_000_001}]}
    resp = service.client.post("/admin/documents", json=body, headers=service.admin())
    assert_refused(resp, 422, "at most 1000000 characters")
    assert service.runtime.kb.document_ids() == [] and service.runtime.kb.version == 0


def test_duplicate_ids_in_one_batch(unchanged: Service) -> None:
    service = unchanged
    body = {
        "documents": [
            {"id": "guide/a.md", "text": "one"},
            {"id": "b", "text": "two"},
            {"id": "guide/a.md", "text": "three"},
        ]
    }
    resp = service.client.post("/admin/documents", json=body, headers=service.admin())
    assert_refused(resp, 422, "duplicate document ids in one request: guide/a.md")


@pytest.mark.parametrize(
    ("doc_id", "needle"),
    [
        ("a\tb", "U+0009"),
        ("a\nb", "U+000A"),
        ("a\x7fb", "U+007F"),
        ("a\u200bb", "U+200B"),  # zero-width space (a format character)
        ("a\u202eb", "U+202E"),  # right-to-left override
        ("a\u00a0b", "U+00A0"),  # no-break space: only ' ' counts as printable space
        (" lead", "leading or trailing whitespace"),
        ("trail ", "leading or trailing whitespace"),
        ("", "at least 1 character"),
    ],
)
def test_ids_with_control_characters(unchanged: Service, doc_id: str, needle: str) -> None:
    service = unchanged
    resp = service.client.post(
        "/admin/documents",
        json={"documents": [{"id": doc_id, "text": "x"}]},
        headers=service.admin(),
    )
    assert_refused(resp, 422, needle)


def test_top_k_out_of_range(unchanged: Service) -> None:
    service = unchanged
    for top_k in (0, -1, 21, 10**6):
        resp = service.client.post("/v1/chat", json={"question": "Zorn?", "top_k": top_k})
        assert_refused(resp, 422, '"top_k"')
        resp = service.client.get(
            "/admin/kg/subgraph",
            params={"question": "Zorn?", "top_k": top_k},
            headers=service.admin(),
        )
        assert_refused(resp, 422, '"top_k"')


def test_malformed_openai_messages(unchanged: Service) -> None:
    service = unchanged
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    for messages, needle in (
        ([], "at least 1"),
        ([{"role": "assistant", "content": "no question"}], "role 'user'"),
        ([{"role": "user", "content": "  "}], "question is empty"),
        ([{"role": "robot", "content": "x"}], "'system', 'user' or 'assistant'"),
        ([{"role": "tool", "content": "x"}], '"role"'),
        ([{"role": "user", "content": [{"type": "text", "text": "a"}, image]}], "'image_url'"),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], "'input_audio'"),
        ([{"role": "user", "content": ["plain string part"]}], "type 'str'"),
        ([{"role": "user", "content": [{"type": "text"}]}], "'text' must be a string"),
        ([{"role": "user", "content": []}], "empty list of parts"),
        ([{"role": "user", "content": "x" * 2001}], "over 2000 characters"),
    ):
        resp = service.client.post("/v1/chat/completions", json={"messages": messages})
        assert_refused(resp, 422, needle)


def test_text_content_parts_are_joined(fake_service: Service) -> None:
    engine = fake_service.runtime.llm
    assert isinstance(engine, FakeEngine)
    fake_service.ingest(DOC)
    parts = [
        {"type": "text", "text": "Which town"},
        {"type": "text", "text": "does the Zorn flow through?"},
    ]
    history = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}]
    resp = fake_service.client.post(
        "/v1/chat/completions",
        json={"messages": [*history, {"role": "user", "content": parts}]},
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["warmrag"]["passages"][0]["doc_id"] == "zorn"
    sent = " ".join(engine.chats[-1])
    assert "Which town does the Zorn flow through?" in sent
    assert "Be brief." in sent


def test_validation_errors_do_not_echo_the_input(unchanged: Service) -> None:
    secret = "s3cr3t-" + "z" * 2000
    resp = unchanged.client.post("/v1/chat", json={"question": secret})
    assert resp.status_code == 422
    assert "s3cr3t" not in resp.text
