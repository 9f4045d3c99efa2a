"""What an operator watches: first-token latency split warm/cold, HTTP metrics per route
and status, and JSON log lines that carry the request's id.

``FakeEngine`` stands in for vLLM (the fake caches prefix blocks as vLLM does, so warm
and cold chats are told apart by the same rule); fault injected in the log test: the
fake vLLM down, which makes the app log a warning inside the request.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.logs import LogFormat, log_handler
from rag.chat.metrics import FIRST_TOKEN_BUCKETS
from tests.conftest import Service
from tests.fakes import FakeEngine

StartFake = Callable[..., tuple[Service, FakeEngine]]
DOC = {"id": "zorn", "text": "The river Zorn flows through the town of Kellerby."}
BREAD = {"id": "bread", "text": "Bread is baked from flour, water and salt."}
QUESTION = "Which town does the river Zorn flow through?"


def samples(service: Service) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = service.client.get("/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def test_first_token_latency_is_split_warm_and_cold(fake_service: Service) -> None:
    fake_service.ingest(DOC, BREAD)
    fake_service.client.post(
        "/admin/warmup/queries", json={"queries": [QUESTION]}, headers=fake_service.admin()
    )
    assert fake_service.chat(QUESTION)["cache"]["warm_hit"]
    assert fake_service.chat("What is bread baked from?")["cache"]["warm_state"] == "cold"

    found = samples(fake_service)
    ttft = "warmrag_first_token_latency_seconds"
    assert value(found, f"{ttft}_count", warm="true") == 1
    assert value(found, f"{ttft}_count", warm="false") == 1
    # 50 ms buckets to 1 s (the heat map's 20), then on to 30 s
    les = sorted(
        float(dict(labels)["le"])
        for name, labels in found
        if name == f"{ttft}_bucket" and ("warm", "true") in labels
    )
    assert les[:20] == pytest.approx([0.05 * i for i in range(1, 21)])
    assert les[-2:] == [30.0, float("inf")] and max(FIRST_TOKEN_BUCKETS) >= 10
    assert value(found, "warmrag_warm_budget_tokens") > 0


def test_http_requests_are_counted_per_route_template_and_status(fake_service: Service) -> None:
    fake_service.ingest(DOC)
    fake_service.client.delete("/admin/documents/zorn", headers=fake_service.admin())
    fake_service.client.delete("/admin/documents/zorn", headers=fake_service.admin())
    fake_service.client.post("/v1/chat", json={"question": ""})
    found = samples(fake_service)
    requests = "warmrag_http_requests_total"
    route = "/admin/documents/{doc_id:doc_id}"
    assert value(found, requests, handler=route, method="DELETE", status="200") == 1
    assert value(found, requests, handler=route, method="DELETE", status="404") == 1
    assert value(found, requests, handler="/v1/chat", method="POST", status="422") == 1
    assert value(found, requests, handler="/admin/documents", method="POST", status="200") == 1
    # /metrics does not count itself
    assert not any(dict(labels).get("handler") == "/metrics" for _, labels in found)


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The root logger's lines, as ``WARMRAG_LOG_FORMAT=json`` writes them."""
    stream = io.StringIO()
    handler = log_handler(LogFormat.JSON, stream)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_json_log_lines_carry_the_request_id(fake_service: Service, json_log: io.StringIO) -> None:
    fake_service.runtime.llm.down = True  # type: ignore[attr-defined]
    request_id = uuid.uuid4().hex
    resp = fake_service.client.post(
        "/v1/chat", json={"question": QUESTION}, headers={"X-Request-ID": request_id}
    )
    assert resp.status_code == 503
    assert resp.headers["x-request-id"] == request_id
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert lines, "nothing was logged"
    assert all(set(line) >= {"time", "level", "logger", "request_id", "message"} for line in lines)
    mine = [line for line in lines if line["request_id"] == request_id]
    assert any(
        line["level"] == "WARNING" and "POST /v1/chat" in line["message"] for line in mine
    ), lines
    # outside a request the id is "-"
    logging.getLogger("warmrag.test").warning("outside")
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    outside = [line for line in lines if line["message"] == "outside"]
    assert [line["request_id"] for line in outside] == ["-"]


def test_bad_cases_are_grouped_over_http(start_fake_service: StartFake) -> None:
    """Fault injected: the fake vLLM evicts every cached block (memory pressure)."""
    service, engine = start_fake_service(bad_case_ttft_ms=100_000.0)
    service.ingest(DOC, BREAD)
    service.client.post(
        "/admin/warmup/queries", json={"queries": [QUESTION]}, headers=service.admin()
    )
    assert service.chat(QUESTION)["cache"]["warm_state"] == "hit"
    engine.evict_all()
    evicted = service.chat(QUESTION)["cache"]
    assert evicted["warm_state"] == "evicted" and not evicted["warm_hit"]
    assert service.chat("What is bread baked from?")["cache"]["warm_state"] == "cold"

    body = service.client.get("/admin/bad-cases", headers=service.admin()).json()
    assert body["total"] == 1 and body["ttft_threshold_ms"] == 100_000.0
    (group,) = body["groups"]
    assert group["count"] == 1 and group["reasons"] == {"evicted": 1}
    example = group["example"]
    assert example["question"] == QUESTION and example["warm_state"] == "evicted"
    assert example["query_key"] and example["context_fingerprint"]
    assert example["prompt_tokens"] > example["cached_tokens"]
    assert 'warmrag_bad_cases_total{reason="evicted"} 1.0' in service.client.get("/metrics").text


def test_slow_chats_are_bad_cases_grouped_by_question(start_fake_service: StartFake) -> None:
    service, _ = start_fake_service(bad_case_ttft_ms=0.001)  # every chat is "slow"
    service.ingest(DOC, BREAD)
    for question in (
        QUESTION,
        "Through which town does the Zorn river flow?",
        "What is bread baked from?",
    ):
        service.chat(question)
    groups = service.client.get("/admin/bad-cases", headers=service.admin()).json()["groups"]
    assert [g["count"] for g in groups] == [2, 1]
    assert groups[0]["reasons"] == {"slow": 2}
    assert len(groups[0]["questions"]) == 2
    resp = service.client.get("/admin/bad-cases", params={"similarity": 2})
    assert resp.status_code == 401  # admin only
    resp = service.client.get("/admin/bad-cases", params={"similarity": 2}, headers=service.admin())
    assert resp.status_code == 422


def test_a_chat_cut_off_after_its_first_token_still_counts_its_latency(
    start_fake_service: StartFake,
) -> None:
    """Fault injected: the fake vLLM's stream breaks after its first delta."""
    service, engine = start_fake_service()
    service.ingest(DOC)
    engine.crash_after_deltas = 1
    body_json = {"question": QUESTION, "stream": True}
    with service.client.stream("POST", "/v1/chat", json=body_json) as r:
        body = r.read().decode()
    assert r.status_code == 200 and "event: error" in body and "event: done" not in body
    found = samples(service)
    assert value(found, "warmrag_first_token_latency_seconds_count", warm="false") == 1
    assert value(found, "warmrag_first_token_latency_seconds_count", warm="true") == 0
    requests = "warmrag_chat_requests_total"
    assert value(found, requests, endpoint="chat_stream", outcome="llm_unavailable") == 1
    # not a finished chat: no bad case was kept for it
    assert service.client.get("/admin/bad-cases", headers=service.admin()).json()["total"] == 0
