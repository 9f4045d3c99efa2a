"""The admin warmup routes over HTTP, on the whole app with ``FakeEngine`` in vLLM's
place: what the real-vLLM suite (tests/api/test_warmup.py) relies on, checked fast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Service
from tests.fakes import FakeEngine
from tests.warmup.rig import DOCS, QUESTIONS

StartFake = Callable[..., tuple[Service, FakeEngine]]


def seed(service: Service, *queries: str) -> dict[str, Any]:
    resp = service.client.post(
        "/admin/warmup/queries", json={"queries": list(queries)}, headers=service.admin()
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def test_seed_registry_hit_and_reports(start_fake_service: StartFake) -> None:
    service, engine = start_fake_service(FakeEngine(num_blocks=4096))
    service.ingest(*[d.model_dump() for d in DOCS])
    kinds = [r["kind"] for r in service.warmup_cycle()]
    assert kinds == ["kb_change", "sweep", "hot"]
    engine.evict_all()
    report = seed(service, QUESTIONS["zorn"])
    assert report["kind"] == "seed" and report["warm_requests"] == 1
    registry = service.registry()
    [entry] = registry["entries"]
    assert entry["queries"] == ["what do we know about the river zorn"]
    assert entry["ttl_s"] > 0 and "messages" not in entry
    assert registry["warm_tokens"] == entry["prefix_tokens"] <= registry["budget"]["max_tokens"]
    assert registry["pending_changes"] == 0 and registry["warm_requests_sent"] == 1
    assert {j["id"] for j in registry["jobs"]} == {"detect", "ttl_sweep", "hot_warmup"}
    body = service.chat(QUESTIONS["zorn"])
    assert body["cache"]["warm_hit"] is True
    assert service.registry()["entries"][0]["hits"] == 1
    resp = service.client.get("/admin/warmup/reports", headers=service.admin())
    assert [r["kind"] for r in resp.json()][-1] == "seed"


def test_a_strategy_that_ignores_changes_keeps_none_pending(start_fake_service: StartFake) -> None:
    service, _ = start_fake_service(FakeEngine(num_blocks=4096), warmup_strategy="hot_queries")
    assert service.settings.warmup.strategy == "hot_queries"
    service.ingest(*[d.model_dump() for d in DOCS])
    assert service.registry()["pending_changes"] == 0
    report = service.warmup_cycle()[0]
    assert report["kind"] == "kb_change" and report["entries_checked"] == 0
