"""Chat over HTTP against the real vLLM: citations, streaming, OpenAI shape, cache."""

from __future__ import annotations

import asyncio
import json

from rag.llm.client import VLLMClient
from tests.conftest import MODEL_NAME, Service

DOCS = [
    {
        "id": "zorn",
        "text": "The river Zorn flows through the town of Kellerby. Its water is green.",
    },
    {"id": "bread", "text": "Bread is baked from flour, water, salt and yeast in a hot oven."},
    {
        "id": "mars",
        "text": "Mars is the fourth planet from the Sun and has two moons, Phobos and Deimos.",
    },
    {"id": "tea", "text": "Green tea is made from leaves that are steamed soon after picking."},
]


def sse_events(text: str) -> list[tuple[str, str]]:
    events = []
    for block in text.strip().split("\n\n"):
        name, data = "message", ""
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        events.append((name, data))
    return events


def test_chat_cites_the_passage_that_holds_the_answer(service: Service) -> None:
    service.ingest(*DOCS)
    body = service.chat("How many moons does Mars have?")
    assert body["passages"][0]["doc_id"] == "mars"
    assert len(body["passages"]) == 3
    assert body["passages"][0]["score"] >= body["passages"][1]["score"]
    assert set(body["passages"][0]) == {"doc_id", "chunk_id", "text", "score"}
    assert body["answer"].strip()
    assert body["triples"] == [] or all(len(t) == 3 for t in body["triples"])
    assert body["cache"]["prompt_tokens"] > 50
    timings = body["timings"]
    assert 0 < timings["retrieval_ms"] <= timings["ttft_ms"] <= timings["total_ms"]


def test_top_k(service: Service) -> None:
    service.ingest(*DOCS)
    assert len(service.chat("Mars", top_k=1)["passages"]) == 1


def test_streaming_chat_sends_tokens_then_the_rest(service: Service) -> None:
    service.ingest(*DOCS)
    with service.client.stream(
        "POST", "/v1/chat", json={"question": "What is bread made of?", "stream": True}
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp.read().decode())
    tokens = [json.loads(d)["text"] for name, d in events if name == "token"]
    assert len(tokens) >= 2
    assert events[-1][0] == "done"
    final = json.loads(events[-1][1])
    assert final["answer"] == "".join(tokens)
    assert final["passages"][0]["doc_id"] == "bread"
    assert set(final) == {"answer", "passages", "triples", "cache", "timings", "finish_reason"}


def test_openai_request_validation(service: Service) -> None:
    bodies: list[dict[str, list[dict[str, str]]]] = [
        {"messages": []},
        {"messages": [{"role": "assistant", "content": "no question"}]},
        {"messages": [{"role": "user", "content": "  "}]},
        {"messages": [{"role": "robot", "content": "x"}]},
    ]
    for body in bodies:
        resp = service.client.post("/v1/chat/completions", json=body)
        assert resp.status_code == 422, body


def test_bad_questions_are_422(service: Service) -> None:
    for body in (
        {"question": ""},
        {"question": "   \n"},
        {"question": "x" * 2001},
        {},
        {"question": "ok", "top_k": 0},
    ):
        resp = service.client.post("/v1/chat", json=body)
        assert resp.status_code == 422, body
        assert resp.json()["detail"]


def test_warm_prefix_is_reused_by_a_chat_with_a_new_question(service: Service) -> None:
    """The prompt builder's contract: prefilling the prefix of a context makes any
    question on that context hit vLLM's prefix cache for all its full blocks."""
    long_docs = [
        {
            "id": f"zorn-{i}",
            "text": f"Fact {i} about the river Zorn: " + "It is long and green. " * 60,
        }
        for i in range(3)
    ]
    service.ingest(*long_docs)
    runtime = service.runtime
    question = "What colour is the river Zorn?"
    retrieval = runtime.retriever.retrieve(question, 3)
    prefix = runtime.builder.prefix(retrieval.passages, retrieval.triples)

    async def warm() -> tuple[int, int]:
        llm = VLLMClient(service.settings.vllm_url or "", MODEL_NAME)
        try:
            usage = await llm.prefill(prefix.messages)
            return usage.prompt_tokens, await llm.block_size()
        finally:
            await llm.aclose()

    prefix_tokens, block = asyncio.run(warm())
    assert prefix_tokens >= block, "the test context must span at least one full KV block"
    # Block-aligned (``rag.llm.alignment``): the prefix fills whole blocks, all of them reused.
    assert prefix_tokens % block == 0

    body = service.chat("Is the Zorn river long? Answer briefly.")
    assert sorted(p["chunk_id"] for p in body["passages"]) == list(prefix.chunk_ids)
    assert body["cache"]["cached_tokens"] == prefix_tokens
    assert 0 < body["cache"]["prompt_tokens"] - prefix_tokens < block  # the question turn


def test_a_repeated_question_reuses_its_context_until_a_change_moves_it(
    service: Service,
) -> None:
    """The warm path: no retrieval for a question asked before, while no change touched
    its context; an unrelated change keeps it, a change to its document does not."""
    service.ingest(*DOCS)
    question = "How many moons does Mars have?"
    first = service.chat(question)
    again = service.chat("how many MOONS does mars have")  # the same key
    assert not first["timings"]["context_reused"] and again["timings"]["context_reused"]
    assert again["passages"] == first["passages"] and again["triples"] == first["triples"]
    assert again["cache"]["cached_tokens"] > 0

    # Deleting a document the context does not use cannot move it.
    (unused,) = {d["id"] for d in DOCS} - {p["doc_id"] for p in first["passages"]}
    resp = service.client.delete(f"/admin/documents/{unused}", headers=service.admin())
    assert resp.status_code == 200, resp.text
    assert service.chat(question)["timings"]["context_reused"]

    mars = {"id": "mars", "text": "Mars is the fourth planet and has two small moons."}
    service.ingest(mars)
    after = service.chat(question)
    assert not after["timings"]["context_reused"]
    assert "two small moons" in service.runtime.retriever.retrieve(question).passages[0].text
