"""What a user reads of an answer over HTTP: where its prefix came from (``cache.served``:
warm hit, cached by vLLM, cold) and an answer that loops, stopped where it repeats.

The served state is read off the session's real vLLM. For a looping answer
``FakeEngine`` stands in for vLLM: it answers with a chosen text (a loop on demand).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from rag.chat.prompt import PassageOrder
from rag.chat.repetition import repeats
from tests.conftest import Service, ServiceFactory
from tests.fakes import FakeEngine

StartFake = Callable[..., tuple[Service, FakeEngine]]
DOC = {"id": "zorn", "text": "The river Zorn flows through the town of Kellerby."}
QUESTION = "Which town does the river Zorn flow through?"
OTHER = "What flows through Kellerby?"
LOOP = "The foreign key constraint is only enforced when foreign key constraints are created."


def served_counts(service: Service) -> dict[str, float]:
    families = text_string_to_metric_families(service.client.get("/metrics").text)
    return {
        sample.labels["served"]: sample.value
        for family in families
        if family.name == "warmrag_chat_served"
        for sample in family.samples
        if sample.name == "warmrag_chat_served_total"
    }


def test_served_tells_warm_from_cached_by_vllm_from_cold(start_service: ServiceFactory) -> None:
    """On the session's real vLLM: the served state is read off vLLM's own cached tokens."""
    service = start_service()
    service.ingest(DOC)
    first, again = service.chat(QUESTION)["cache"], service.chat(QUESTION)["cache"]
    # Asked twice, never warmed: the second is all cached by vLLM, and says so.
    assert (first["served"], first["warm_state"], first["warm_hit"]) == ("cold", "cold", False)
    assert (again["served"], again["warm_state"], again["warm_hit"]) == ("cached", "cold", False)
    assert again["cached_tokens"] >= again["prefix_tokens"] > first["cached_tokens"]

    resp = service.client.post(
        "/admin/warmup/queries", json={"queries": [OTHER]}, headers=service.admin()
    )
    assert resp.status_code == 200, resp.text
    warm = service.chat(OTHER)["cache"]
    assert (warm["served"], warm["warm_state"], warm["warm_hit"]) == ("warm", "hit", True)
    assert served_counts(service) == {"warm": 1.0, "cached": 1.0, "cold": 1.0}


def test_a_looping_answer_is_stopped_before_it_repeats(start_fake_service: StartFake) -> None:
    engine = FakeEngine(answer=f"Kellerby. {LOOP} {LOOP} {LOOP} {LOOP}")
    service, _ = start_fake_service(engine=engine, max_tokens=200)
    service.ingest(DOC)
    body = service.chat(QUESTION)
    assert body["finish_reason"] == "repeat"
    assert LOOP.rstrip(".") in body["answer"] and not repeats(body["answer"])
    # The stream was read to its end: the cache facts are vLLM's, not a guess.
    assert body["cache"]["prompt_tokens"] > 0
    assert engine.penalties == [1.0]  # the default frequency penalty reached vLLM

    streamed = service.client.post("/v1/chat", json={"question": QUESTION, "stream": True})
    tokens = [
        line.removeprefix("data: ")
        for line in streamed.text.splitlines()
        if line.startswith("data: ") and '"text"' in line
    ]
    assert not repeats("".join(tokens)), "the stream showed the repeat"
    resp = service.client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": QUESTION}]}
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["finish_reason"] == "stop"


def test_the_guard_and_the_penalty_can_be_turned_off(start_fake_service: StartFake) -> None:
    engine = FakeEngine(answer=f"{LOOP} {LOOP}")
    service, _ = start_fake_service(
        engine=engine, max_tokens=200, chat_stop_on_repeat=False, chat_frequency_penalty=0.0
    )
    service.ingest(DOC)
    body = service.chat(QUESTION)
    assert body["finish_reason"] == "stop" and repeats(body["answer"])
    assert engine.penalties == [0.0]


def test_the_passage_order_setting_reaches_the_prompts(start_fake_service: StartFake) -> None:
    service, engine = start_fake_service(passage_order="rank")
    service.ingest(DOC, {"id": "aaa-bread", "text": "Bread is baked from flour and water."})
    body = service.chat(QUESTION, top_k=2)
    best = max(body["passages"], key=lambda p: p["score"])["doc_id"]
    assert best == "zorn"  # sorts after aaa-bread by id: rank order puts it first anyway
    prompt = " ".join(engine.chats[-1])
    assert prompt.index("zorn") < prompt.index("aaa-bread")
    assert service.runtime.builder.order is PassageOrder.RANK
