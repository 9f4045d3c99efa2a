"""The console's page and the admin views it reads: traffic, the graph around an
entity, the registry's residency. The browser drives them in test_console_browser.py."""

from __future__ import annotations

import re
from collections.abc import Callable

from api.routes.console import CONSOLE_DIR
from tests.conftest import Service
from tests.fakes import FakeEngine

StartFake = Callable[..., tuple[Service, FakeEngine]]
DOC = {"id": "zorn", "text": "The river Zorn flows through the town of Kellerby."}
BREAD = {"id": "bread", "text": "Bread is baked from flour, water and salt."}
QUESTION = "Which town does the river Zorn flow through?"
HARWICK = {
    "id": "harwick",
    "text": "The Harwick lighthouse stands on the cliffs of Harwick.",
    "triples": [
        ["Harwick lighthouse", "located in", "Harwick"],
        ["Harwick", "part of", "Norland"],
        ["Norland", "borders", "Estmark"],
        ["Harwick", "twinned with", "Harwick"],
    ],
}


def test_the_console_is_served_from_this_origin_only(fake_service: Service) -> None:
    page = fake_service.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    for asset in re.findall(r'(?:src|href)="(/console/[^"]+)"', page.text):
        assert fake_service.client.get(asset).status_code == 200, asset
    assert (
        fake_service.client.get("/console/console.js")
        .headers["content-type"]
        .startswith("text/javascript")
    )
    assert fake_service.client.get("/console/nothing.js").status_code == 404
    # Nothing is fetched from elsewhere: no URL in any asset but the SVG namespace.
    for path in CONSOLE_DIR.iterdir():
        urls = set(re.findall(r"https?://[^\s\"')]+", path.read_text(encoding="utf-8")))
        assert urls <= {"http://www.w3.org/2000/svg"}, (path.name, urls)
    # The page is no API: it is not in the OpenAPI schema.
    assert "/" not in fake_service.client.get("/openapi.json").json()["paths"]


def test_traffic_counts_warm_and_cold_chats_in_50_ms_buckets(start_fake_service: StartFake) -> None:
    service, engine = start_fake_service()
    service.ingest(DOC, BREAD)
    service.client.post(
        "/admin/warmup/queries", json={"queries": [QUESTION]}, headers=service.admin()
    )
    states = [
        service.chat(QUESTION)["cache"]["warm_state"],
        service.chat("What is bread baked from?")["cache"]["warm_state"],
    ]
    engine.evict_all()
    states.append(service.chat(QUESTION)["cache"]["warm_state"])
    assert states == ["hit", "cold", "evicted"]

    assert service.client.get("/admin/traffic").status_code == 401
    resp = service.client.get(
        "/admin/traffic", params={"window_s": 300, "slice_s": 60}, headers=service.admin()
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["chats"], body["warm"]) == (3, 1)
    assert body["hit_rate"] == 1 / 3
    assert len(body["slices"]) == 5 and body["bucket_ms"] == 50
    assert body["bucket_edges_ms"][-1] == 950
    warm = [sum(s["warm_buckets"]) for s in body["slices"]]
    cold = [sum(s["cold_buckets"]) for s in body["slices"]]
    assert (sum(warm), sum(cold)) == (1, 2)
    assert [s["hit_rate"] for s in body["slices"] if s["chats"] == 0] == [None] * (
        5 - sum(1 for s in body["slices"] if s["chats"])
    )
    too_many = service.client.get(
        "/admin/traffic", params={"window_s": 86_400, "slice_s": 1}, headers=service.admin()
    )
    assert too_many.status_code == 422 and "at most 1440" in too_many.json()["detail"]


def test_the_graph_around_an_entity(fake_service: Service) -> None:
    fake_service.ingest(HARWICK)
    admin = fake_service.admin()
    resp = fake_service.client.get("/admin/kg/around", params={"entity": "harwick"}, headers=admin)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["entity"]["name"] == "Harwick" and body["total"] == 3

    def facts(triples: list[dict[str, str]]) -> list[tuple[str, str, str]]:
        return [(t["subject"], t["predicate"], t["object"]) for t in triples]

    # by direction, each by predicate; a triple from Harwick to itself is outgoing, once;
    # the Norland-Estmark fact is two hops away, not around Harwick
    assert facts(body["outgoing"]) == [
        ("Harwick", "part of", "Norland"),
        ("Harwick", "twinned with", "Harwick"),
    ]
    assert facts(body["incoming"]) == [("Harwick lighthouse", "located in", "Harwick")]
    assert all(t["doc_id"] == "harwick" for t in body["outgoing"] + body["incoming"])
    one = fake_service.client.get(
        "/admin/kg/around", params={"entity": "Harwick", "limit": 1}, headers=admin
    ).json()
    assert (len(one["outgoing"]), one["incoming"], one["total"]) == (1, [], 3)
    missing = fake_service.client.get(
        "/admin/kg/around", params={"entity": "Atlantis"}, headers=admin
    )
    assert missing.status_code == 404 and "Atlantis" in missing.json()["detail"]
    assert fake_service.client.get("/admin/kg/around", params={"entity": "x"}).status_code == 401


def test_the_registry_says_which_entries_wait_for_a_rewarm(fake_service: Service) -> None:
    fake_service.ingest(DOC)
    fake_service.client.post(
        "/admin/warmup/queries", json={"queries": [QUESTION]}, headers=fake_service.admin()
    )
    (entry,) = fake_service.registry()["entries"]
    assert entry["residency"] == "warm"
    warmup = fake_service.runtime.warmup
    assert warmup is not None
    warmup.restorer.mark_evicted(entry["fingerprint"])  # what a chat that found it evicted does
    (entry,) = fake_service.registry()["entries"]
    assert entry["residency"] == "evicted"


def test_the_registry_counts_what_warmup_declined(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]],
) -> None:
    """A KV cache of 2 GiB gives warmup no budget (the seed's tiers): the seed query is
    declined, and the registry view says so, by reason, next to no entry."""
    service, _ = start_fake_service(FakeEngine(memory_bytes=2 << 30))
    service.ingest(DOC)
    resp = service.client.post(
        "/admin/warmup/queries", json={"queries": [QUESTION]}, headers=service.admin()
    )
    assert resp.json()["declined"] == {"no_budget": 1}
    registry = service.registry()
    assert registry["entries"] == [] and registry["declined"] == {"no_budget": 1}
    assert registry["truncated"] == 0
    metrics = service.client.get("/metrics").text
    assert 'warmrag_warmup_declined_total{reason="no_budget"} 1.0' in metrics
