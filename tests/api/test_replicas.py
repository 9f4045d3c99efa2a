"""Two vLLM replicas behind the whole app (``FakeEngine``s in their place: prefix
blocks per replica, a replica switched down on demand). What the real two-server
run (bench/replicas.py) measures, checked fast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api.metrics import ServiceMetrics
from rag.llm.pool import Replica, ReplicaPool
from tests.api.test_vllm_faults import wait_for
from tests.conftest import Service, Services
from tests.fakes import FakeEngine
from tests.warmup.rig import DOCS, QUESTIONS
from tests.warmup.test_routes_fake import seed


def start(
    services: Services,
    engines: tuple[FakeEngine, ...],
    names: tuple[str, ...] = ("r0", "r1"),
    **overrides: Any,
) -> Service:
    """A service over a pool of these engines, named ``names``, reporting to the app's
    metrics."""
    metrics = ServiceMetrics()
    replicas = [Replica(name, e) for name, e in zip(names, engines, strict=True)]
    pool = ReplicaPool(replicas, metrics=metrics.replicas)
    return services.start(llm=pool, metrics=metrics, replica_health_interval_s=0.05, **overrides)


def entries(service: Service) -> dict[str, dict[str, Any]]:
    return {e["queries"][0]: e for e in service.registry()["entries"]}


@pytest.fixture
def engines() -> tuple[FakeEngine, FakeEngine]:
    return FakeEngine(num_blocks=4096), FakeEngine(num_blocks=4096)


def test_a_prefix_is_warmed_and_then_asked_on_the_same_replica(
    services: Services, engines: tuple[FakeEngine, FakeEngine]
) -> None:
    service = start(services, engines)
    service.ingest(*[d.model_dump() for d in DOCS])
    seed(service, *QUESTIONS.values())
    placed = entries(service)
    assert {e["replica"] for e in placed.values()} == {"r0", "r1"}  # spread over both
    for question in QUESTIONS.values():
        chats_before = [len(e.chats) for e in engines]
        body = service.chat(question)
        assert body["cache"]["warm_hit"] is True
        replica = placed[question.lower().rstrip("?")]["replica"]
        chats_after = [len(e.chats) for e in engines]
        assert chats_after[int(replica[1])] == chats_before[int(replica[1])] + 1
    ready = service.client.get("/ready").json()
    assert [r["name"] for r in ready["extra"]["replicas"]] == ["r0", "r1"]
    metrics = service.client.get("/metrics").text
    assert 'warmrag_replica_chats_total{hit="true",replica="r0"}' in metrics


def test_when_a_replica_goes_down_its_prefixes_are_warmed_on_the_other(
    services: Services, engines: tuple[FakeEngine, FakeEngine]
) -> None:
    service = start(services, engines)
    service.ingest(*[d.model_dump() for d in DOCS])
    seed(service, *QUESTIONS.values())
    on_r0 = [q for q, e in entries(service).items() if e["replica"] == "r0"]
    assert on_r0
    engines[0].down = True
    wait_for(
        lambda: all(e["replica"] == "r1" for e in entries(service).values()),
        what="r0's entries to be warmed on r1",
    )
    for question in QUESTIONS.values():
        assert service.chat(question)["cache"]["warm_hit"] is True
    assert all(e.chats == [] or not e.down for e in engines)
    reports = service.client.get("/admin/warmup/reports", headers=service.admin()).json()
    failover = [r for r in reports if r["kind"] == "failover"]
    assert failover and failover[-1]["warm_requests"] == len(on_r0)
    metrics = service.client.get("/metrics").text
    assert 'warmrag_replica_up{replica="r0"} 0.0' in metrics

    # Back (restarted, cold): nothing moves eagerly; what lives on r1 stays there.
    engines[0].evict_all()
    engines[0].down = False
    wait_for(
        lambda: service.runtime.pool is not None and "r0" in service.runtime.pool.snapshot().up
    )
    for question in QUESTIONS.values():
        assert service.chat(question)["cache"]["warm_hit"] is True
    assert {e["replica"] for e in entries(service).values()} == {"r1"}


def test_after_a_restart_of_warmrag_prefixes_go_back_to_their_replicas(
    services: Services, engines: tuple[FakeEngine, FakeEngine]
) -> None:
    """The replicas kept their caches; the registry says which holds what."""
    first = start(services, engines)
    first.ingest(*[d.model_dump() for d in DOCS])
    seed(first, *QUESTIONS.values())
    placed = {q: e["replica"] for q, e in entries(first).items()}
    first.stop()
    # A new pool (fresh router memory) listing the replicas the other way round.
    again = start(services, (engines[1], engines[0]), names=("r1", "r0"))
    assert {q: e["replica"] for q, e in entries(again).items()} == placed
    for question in QUESTIONS.values():
        assert again.chat(question)["cache"]["warm_hit"] is True


@pytest.mark.parametrize(
    ("engine", "flag"),
    [
        (FakeEngine(prefix_caching=False), "--enable-prefix-caching"),
        (FakeEngine(reports_cached_tokens=False), "--enable-prompt-tokens-details"),
    ],
)
def test_ready_names_the_flag_a_vllm_server_is_missing(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]], engine: FakeEngine, flag: str
) -> None:
    service, _ = start_fake_service(engine, wait_ready=False)
    wait_for(lambda: service.runtime.phase.value == "failed", what="start-up to fail")
    resp = service.client.get("/ready")
    assert resp.status_code == 503
    assert flag in resp.json()["detail"]
    other = {"--enable-prefix-caching", "--enable-prompt-tokens-details"} - {flag}
    assert other.pop() not in resp.json()["detail"]
