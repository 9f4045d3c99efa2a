"""Knowledge-aware warmup against the real vLLM: every claim is checked with vLLM's
own ``cached_tokens`` and by counting the prefill requests warmup sends."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from rag.llm.client import VLLMClient
from rag.llm.server import VLLMServer
from tests.conftest import MODEL_NAME, Service, ServiceFactory


def topic(doc_id: str, subject: str, fact: str) -> dict[str, Any]:
    filler = " ".join(f"{subject} is described in record {i} of the archive." for i in range(6))
    return {"id": doc_id, "text": f"{fact} {filler}"}


# Three documents per subject, so every question's top-3 is on its subject and an
# unrelated document cannot enter it.
DOCS = [
    topic("zorn", "The river Zorn", "The river Zorn is green and flows through Kellerby."),
    topic("zorn-fish", "The river Zorn", "Trout and pike live in the river Zorn."),
    topic("zorn-bridge", "The river Zorn", "Three stone bridges cross the river Zorn."),
    topic("mars", "The planet Mars", "The planet Mars has two moons called Phobos and Deimos."),
    topic("mars-red", "The planet Mars", "The planet Mars looks red because of iron oxide."),
    topic("mars-year", "The planet Mars", "A year on the planet Mars lasts 687 Earth days."),
    topic("rye", "Rye bread", "Rye bread is baked from rye flour, water and sourdough."),
    topic("rye-crust", "Rye bread", "Rye bread has a dark crust and a dense crumb."),
    topic("rye-keep", "Rye bread", "Rye bread keeps fresh for a week when wrapped."),
]
ZORN_Q = "What colour is the river Zorn?"
ZORN_BLUE = topic("zorn", "The river Zorn", "The river Zorn is blue and flows through Kellerby.")


def reset_prefix_cache(vllm: VLLMServer) -> None:
    """Empty vLLM's prefix cache, as a vLLM restart would."""

    async def reset() -> None:
        client = VLLMClient(vllm.url, "any")
        try:
            await client.reset_prefix_cache()
        finally:
            await client.aclose()

    asyncio.run(reset())


def seed(service: Service, *queries: str) -> dict[str, Any]:
    resp = service.client.post(
        "/admin/warmup/queries", json={"queries": list(queries)}, headers=service.admin()
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def entry_for(service: Service, key: str) -> dict[str, Any]:
    entries = [e for e in service.registry()["entries"] if key in e["queries"]]
    assert len(entries) == 1, service.registry()["entries"]
    return entries[0]


def assert_warm_hit(body: dict[str, Any], entry: dict[str, Any]) -> None:
    assert entry["cached_block_tokens"] >= 128
    assert body["cache"]["cached_tokens"] >= entry["cached_block_tokens"], body["cache"]
    assert body["cache"]["warm_hit"] is True


@pytest.fixture
def warm_service(service: Service, vllm: VLLMServer) -> Service:
    service.ingest(*DOCS)
    service.warmup_cycle()  # detection for the initial ingest, before the test's own changes
    reset_prefix_cache(vllm)
    return service


def test_unrelated_ingest_extends_ttls_and_sends_no_prefill(warm_service: Service) -> None:
    seed(warm_service, ZORN_Q, "How many moons does Mars have?")
    before = {e["fingerprint"]: e["expires_at"] for e in warm_service.registry()["entries"]}
    sent = warm_service.registry()["warm_requests_sent"]
    time.sleep(0.05)
    warm_service.ingest(
        {"id": "piano", "text": "A grand piano has eighty-eight keys and three pedals."}
    )
    report = warm_service.warmup_cycle()[0]
    # Each query's bars (its weakest fact while its fact slots are full) keep the
    # piano's facts out: no entry is even retrieved again. With the lowest bar a held
    # fact can have (the selector's threshold), one entry was.
    assert report["affected"] == 0
    assert report["rewarmed"] == 0 and report["warm_requests"] == 0
    assert report["extended"] == len(before)
    after = warm_service.registry()
    assert after["warm_requests_sent"] == sent, "an unrelated document caused a prefill"
    assert {e["fingerprint"] for e in after["entries"]} == set(before)
    assert all(e["expires_at"] > before[e["fingerprint"]] for e in after["entries"])


def test_after_a_change_the_hottest_context_is_rewarmed_first(warm_service: Service) -> None:
    questions = [ZORN_Q, "How many moons does Mars have?", "What is rye bread baked from?"]
    hot = 2  # the one users ask most
    seed(warm_service, *questions)
    for _ in range(3):
        warm_service.chat(questions[hot])
    warm_service.ingest(
        topic("zorn", "The river Zorn", "The river Zorn is grey and flows through Kellerby."),
        topic("mars", "The planet Mars", "The planet Mars has two small moons."),
        topic("rye", "Rye bread", "Rye bread is baked from rye flour and salt."),
    )
    report = warm_service.warmup_cycle()[0]
    assert report["affected"] == 3 and report["warm_requests"] == 3
    warmed_at = {
        key: entry_for(warm_service, key)["warmed_at"]
        for key in ("what colour is the river zorn", "how many moons does mars have",
                    "what is rye bread baked from")
    }  # fmt: skip
    hot_key = list(warmed_at)[hot]
    assert warmed_at[hot_key] == min(warmed_at.values()), warmed_at


def test_a_new_chunk_that_enters_the_top_k_is_detected(warm_service: Service) -> None:
    seed(warm_service, ZORN_Q)
    old = entry_for(warm_service, "what colour is the river zorn")
    warm_service.ingest({"id": "zorn-2", "text": "The colour of the river Zorn is a deep green."})
    report = warm_service.warmup_cycle()[0]
    assert report["affected"] == 1 and report["warm_requests"] == 1
    new = entry_for(warm_service, "what colour is the river zorn")
    assert "zorn-2" in new["doc_ids"] and new["fingerprint"] != old["fingerprint"]


def test_deleting_a_document_retires_its_entries(warm_service: Service) -> None:
    seed(warm_service, "How many moons does the planet Mars have?")
    old = entry_for(warm_service, "how many moons does the planet mars have")
    assert "mars" in old["doc_ids"]
    resp = warm_service.client.delete("/admin/documents/mars", headers=warm_service.admin())
    assert resp.status_code == 200
    warm_service.warmup_cycle()
    fingerprints = {e["fingerprint"] for e in warm_service.registry()["entries"]}
    assert old["fingerprint"] not in fingerprints
    assert all("mars" not in e["doc_ids"] for e in warm_service.registry()["entries"])


def test_detection_never_reembeds_stored_queries(warm_service: Service) -> None:
    seed(warm_service, ZORN_Q, "How many moons does Mars have?", "What is rye bread baked from?")
    warm_service.ingest(
        topic("zorn", "The river Zorn", "The river Zorn is grey and flows through Kellerby.")
    )
    embedded = warm_service.runtime.embedder.texts_embedded
    report = warm_service.warmup_cycle()[0]
    assert report["affected"] >= 1 and report["warm_requests"] >= 1
    assert warm_service.runtime.embedder.texts_embedded == embedded


def test_recent_cycles_say_what_each_did(warm_service: Service) -> None:
    """Operators (and the benchmark) read what ran when: idle cycles are left out."""
    since = time.time()
    seed(warm_service, ZORN_Q)
    warm_service.ingest(
        topic("zorn", "The river Zorn", "The river Zorn is grey and flows through Kellerby.")
    )
    warm_service.warmup_cycle()  # detection, then a sweep and a hot cycle with nothing to do
    resp = warm_service.client.get(
        "/admin/warmup/reports", params={"since": since}, headers=warm_service.admin()
    )
    assert resp.status_code == 200
    reports = resp.json()
    assert [r["kind"] for r in reports] == ["seed", "kb_change"], reports
    assert reports[0]["warm_requests"] == 1
    assert reports[1]["affected"] >= 1 and reports[1]["rewarmed"] >= 1
    assert since <= reports[0]["started_at"] <= reports[1]["started_at"] <= time.time()

    later = warm_service.client.get(
        "/admin/warmup/reports", params={"since": time.time() + 60}, headers=warm_service.admin()
    )
    assert later.json() == []
    bad = warm_service.client.get(
        "/admin/warmup/reports", params={"since": -1}, headers=warm_service.admin()
    )
    assert bad.status_code == 422 and "since" in bad.text
    assert warm_service.client.get("/admin/warmup/reports").status_code == 401


def test_ttl_expiry_drops_entries_that_are_not_hot(warm_service: Service) -> None:
    # Time is the one thing the test controls: warmup's clock is moved forward.
    service = warm_service
    now = [time.time()]
    service.runtime.warmup.clock = lambda: now[0]  # type: ignore[union-attr]
    service.chat(ZORN_Q)
    service.chat("What colour is the river Zorn")  # the same key twice: hot
    report = service.warmup_cycle()[2]
    assert report["kind"] == "hot" and report["warm_requests"] == 1
    entry = entry_for(service, "what colour is the river zorn")

    now[0] = entry["expires_at"] - 1  # not yet expired: kept
    assert service.warmup_cycle()[1]["retired"] == 0
    now[0] = entry["expires_at"] + 10 * service.settings.warmup.half_life_s  # expired, cold
    sweep = service.warmup_cycle()[1]
    assert sweep["kind"] == "sweep" and sweep["retired"] == 1
    assert service.registry()["entries"] == []


def test_expired_hot_entries_are_kept_warm(warm_service: Service) -> None:
    service = warm_service
    now = [time.time()]
    service.runtime.warmup.clock = lambda: now[0]  # type: ignore[union-attr]
    seed(service, ZORN_Q)  # seed queries stay hot
    entry = entry_for(service, "what colour is the river zorn")
    now[0] = entry["expires_at"] + 1
    sweep = service.warmup_cycle()[1]
    assert sweep["retired"] == 0 and sweep["warm_requests"] == 1
    assert entry_for(service, "what colour is the river zorn")["expires_at"] > now[0]


def test_budget_is_respected(start_service: ServiceFactory, vllm: VLLMServer) -> None:
    # Room for about one entry (~400-500 tokens): 750 tokens of however many the KV
    # cache holds (the dtype this CPU runs decides that: ~186k in bf16, ~93k in fp32).
    capacity = asyncio.run(cache_capacity(vllm.url))
    service = start_service(warmup_budget_share=750 / capacity)
    service.ingest(*DOCS)
    report = seed(
        service, ZORN_Q, "How many moons does Mars have?", "What is rye bread baked from?"
    )
    registry = service.registry()
    assert registry["warm_tokens"] <= registry["budget"]["max_tokens"]
    assert report["skipped_over_budget"] >= 1
    assert 1 <= len(registry["entries"]) < 3


async def cache_capacity(url: str) -> int:
    client = VLLMClient(url, MODEL_NAME)
    try:
        return (await client.cache_config()).capacity_tokens
    finally:
        await client.aclose()


def test_hot_cycles_retrieve_a_query_again_only_after_a_change_that_can_move_it(
    start_service: ServiceFactory,
) -> None:
    # No budget: the seeds stay hot and unwarmed, so every hot cycle plans them again.
    # No extraction: a document's extracted facts, scoring 0.1 or more against a question
    # whose context holds fewer than three facts, could be chosen (the path gain), and the
    # rule rightly re-retrieves then; this test is about the chunks' part of the rule.
    service = start_service(warmup_budget_share=0.0, kg_extraction=False)
    service.ingest(*DOCS)
    seed(service, ZORN_Q, "How many moons does Mars have?")
    retriever = service.runtime.retriever
    calls: list[str] = []
    retrieve = retriever.retrieve

    def counted(question: str, *args: Any, **kwargs: Any) -> Any:  # a spy: calls through
        calls.append(question)
        return retrieve(question, *args, **kwargs)

    retriever.retrieve = counted  # type: ignore[method-assign]
    service.warmup_cycle()
    assert calls == [], "a hot cycle re-retrieved queries the knowledge base had not moved"

    # A document on another subject cannot enter either top 3 (the context memo's rule).
    service.ingest(topic("rye-salt", "Rye bread", "Rye bread takes a pinch of salt."))
    service.warmup_cycle()
    assert calls == [], "an unrelated document made the hot cycle re-retrieve"

    service.ingest(ZORN_BLUE)  # replaces a document the Zorn context is built from
    service.warmup_cycle()
    assert calls == [ZORN_Q]


def test_a_hotter_question_displaces_a_colder_entry_when_the_budget_is_full(
    start_service: ServiceFactory,
) -> None:
    first = start_service()
    first.ingest(*DOCS)
    seed(first, "How many moons does Mars have?")
    cold = entry_for(first, "how many moons does mars have")
    capacity = first.registry()["budget"]["capacity_tokens"]
    first.stop()
    # Room for the one warm entry and half another: the next context must displace it.
    service = start_service(warmup_budget_share=1.5 * cold["prefix_tokens"] / capacity)
    assert entry_for(service, "how many moons does mars have")["fingerprint"] == cold["fingerprint"]
    for _ in range(4):
        service.chat(ZORN_Q)  # asked four times: hotter than the seed
    hot = service.warmup_cycle()[2]
    assert hot["retired"] == 1 and hot["warm_requests"] == 1, hot
    registry = service.registry()
    assert [e["fingerprint"] for e in registry["entries"]] == [
        entry_for(service, "what colour is the river zorn")["fingerprint"]
    ]
    assert registry["warm_tokens"] <= registry["budget"]["max_tokens"]


def test_eviction_is_noticed_and_rewarmed(warm_service: Service, vllm: VLLMServer) -> None:
    seed(warm_service, ZORN_Q)
    entry = entry_for(warm_service, "what colour is the river zorn")
    reset_prefix_cache(vllm)  # vLLM drops the prefix behind warmrag's back
    body = warm_service.chat(ZORN_Q)
    assert body["cache"]["warm_hit"] is False
    assert "warmrag_kv_cache_miss_total 1.0" in warm_service.client.get("/metrics").text
    deadline = time.monotonic() + 30
    while (
        'warmrag_rewarm_total{reason="evicted"} 1.0' not in warm_service.client.get("/metrics").text
    ):
        assert time.monotonic() < deadline, "the evicted entry was not re-warmed"
        time.sleep(0.1)
    assert_warm_hit(warm_service.chat(ZORN_Q), entry)


def test_entries_past_the_start_up_cap_are_rewarmed_after_ready(
    start_service: ServiceFactory, vllm: VLLMServer
) -> None:
    first = start_service()
    first.ingest(*DOCS)
    seed(first, ZORN_Q, "How many moons does Mars have?")
    assert len(first.registry()["entries"]) == 2
    first.stop()
    reset_prefix_cache(vllm)

    second = start_service(warmup_restore_max_entries=1)
    assert len(second.registry()["entries"]) == 2, "the entry past the cap was dropped"
    deadline = time.monotonic() + 30
    while 'warmrag_rewarm_total{reason="startup"} 2.0' not in second.client.get("/metrics").text:
        assert time.monotonic() < deadline, "the second entry was not re-warmed after ready"
        time.sleep(0.1)
    for key in ("what colour is the river zorn", "how many moons does mars have"):
        entry = entry_for(second, key)
        question = ZORN_Q if "zorn" in key else "How many moons does Mars have?"
        assert_warm_hit(second.chat(question), entry)


def test_changes_are_detected_after_the_debounce(start_service: ServiceFactory) -> None:
    service = start_service(warmup_debounce_s=0.1)
    service.ingest(*DOCS)
    seed(service, ZORN_Q)
    old = entry_for(service, "what colour is the river zorn")
    service.ingest(
        topic("zorn", "The river Zorn", "The river Zorn is red and flows through Kellerby.")
    )
    deadline = time.monotonic() + 30
    while entry_for(service, "what colour is the river zorn")["fingerprint"] == old["fingerprint"]:
        assert time.monotonic() < deadline, "no detection after the debounce"
        time.sleep(0.1)
    jobs = {j["id"]: j["next_run_time"] for j in service.registry()["jobs"]}
    assert set(jobs) == {"detect", "ttl_sweep", "hot_warmup"} and all(jobs.values())
