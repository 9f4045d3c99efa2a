"""The OpenAI-compatible surface driven by the official ``openai`` client: models, chat,
stream, and errors in OpenAI's shape (which the client turns into its typed exceptions).

One test talks to the real vLLM; the others put ``FakeEngine`` in its place to reach
the error paths on demand (faults injected: the fake vLLM down; limits set low).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import MODEL_NAME, Service
from tests.fakes import FakeEngine

StartFake = Callable[..., tuple[Service, FakeEngine]]
DOC = {"id": "zorn", "text": "The river Zorn flows through the town of Kellerby."}
QUESTION = "Which town does the river Zorn flow through?"


def client(service: Service, api_key: str = "unused") -> openai.OpenAI:
    # No retries: a test sees the first answer, and a 429 or 503 is not waited out.
    return openai.OpenAI(base_url=f"{service.url}/v1", api_key=api_key, max_retries=0)


def test_models_chat_and_stream_with_the_real_model(service: Service) -> None:
    service.ingest(DOC, {"id": "bread", "text": "Bread is baked from flour, water and salt."})
    oai = client(service)
    assert [m.id for m in oai.models.list()] == [MODEL_NAME]
    assert oai.models.retrieve(MODEL_NAME).owned_by == "warmrag"

    history: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, ask me anything."},
    ]
    completion = oai.chat.completions.create(
        model="any name", messages=[*history, {"role": "user", "content": QUESTION}]
    )
    assert completion.object == "chat.completion" and completion.model == MODEL_NAME
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens is not None
    extra = completion.model_extra or {}
    assert extra["warmrag"]["passages"][0]["doc_id"] == "zorn"  # RAG on the LAST message

    # The same question again, streamed: its context is in vLLM's prefix cache now.
    stream = oai.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=4,
        stream=True,
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1]
    assert last.choices[0].finish_reason in {"stop", "length"}
    assert last.usage is not None and last.usage.completion_tokens <= 4
    assert last.usage.prompt_tokens_details is not None
    assert last.usage.prompt_tokens_details.cached_tokens
    assert last.usage.prompt_tokens_details.cached_tokens > 0


def test_an_unknown_model_is_a_404_in_openai_shape(fake_service: Service) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client(fake_service).models.retrieve("gpt-9")
    assert "no model 'gpt-9'" in caught.value.message
    assert caught.value.code == "model_not_found"
    assert caught.value.type == "invalid_request_error"
    # model ids may hold slashes, as Hugging Face names do
    resp = fake_service.client.get("/v1/models/org/name")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"


def test_invalid_requests_name_the_problem(fake_service: Service) -> None:
    oai = client(fake_service)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        oai.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "assistant", "content": "no question"}]
        )
    assert "the last message must have role 'user'" in caught.value.message
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"
    assert body["message"].startswith("Value error, the last message")  # no "body:" field
    assert body["param"] is None
    assert body["issues"][0]["msg"].endswith("it is the question")

    resp = fake_service.client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": 7}]}
    )
    error = resp.json()["error"]
    assert resp.status_code == 422
    assert error["param"] == "messages.0.content" and "messages.0.content:" in error["message"]
    assert set(error) == {"message", "type", "param", "code", "issues"}
    # warmrag's own routes keep their shape
    resp = fake_service.client.post("/v1/chat", json={"question": 7})
    assert resp.status_code == 422 and "detail" in resp.json()


def test_api_keys_rate_limits_and_body_size(start_fake_service: StartFake) -> None:
    service, engine = start_fake_service(
        api_keys=["key-one"], chat_rate_limit="1/minute", max_request_bytes=4096
    )
    service.ingest(DOC)
    with pytest.raises(openai.AuthenticationError) as denied:
        client(service, api_key="wrong").chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": QUESTION}]
        )
    assert denied.value.message == "Error code: 401 - wrong API key"
    assert denied.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(service, api_key="wrong").models.list()
    assert not engine.chats

    oai = client(service, api_key="key-one")
    assert [m.id for m in oai.models.list()] == [MODEL_NAME]
    oai.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.RateLimitError) as limited:
        oai.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": QUESTION}]
        )
    assert "chat rate limit reached" in limited.value.message
    assert limited.value.response.headers["retry-after"].isdigit()

    resp = httpx.post(
        f"{service.url}/v1/chat/completions",
        headers={"Authorization": "Bearer key-one"},
        json={"messages": [{"role": "user", "content": "x" * 5000}]},
    )
    assert resp.status_code == 413
    assert "WARMRAG_MAX_REQUEST_BYTES" in resp.json()["error"]["message"]
    assert len(engine.chats) == 1


def test_vllm_down_is_a_server_error_naming_the_component(start_fake_service: StartFake) -> None:
    """Fault injected: the fake vLLM raises ``LLMUnavailableError``."""
    service, engine = start_fake_service()
    service.ingest(DOC)
    engine.down = True
    for stream in (False, True):
        with pytest.raises(openai.InternalServerError) as caught:
            client(service).chat.completions.create(
                model=MODEL_NAME, messages=[{"role": "user", "content": QUESTION}], stream=stream
            )
        error = caught.value.body
        assert caught.value.status_code == 503
        assert isinstance(error, dict) and error["component"] == "vllm"
        assert error["type"] == "server_error" and error["request_id"]
        assert caught.value.response.headers["x-request-id"] == error["request_id"]
