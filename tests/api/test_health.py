"""Health, readiness, metrics, and what clients see when vLLM is down."""

from __future__ import annotations

from api.server import free_port
from tests.conftest import Service, ServiceFactory


def test_health_ready_metrics(service: Service) -> None:
    assert service.client.get("/health").json() == {"status": "ok"}
    ready = service.client.get("/ready")
    assert ready.status_code == 200 and ready.json()["phase"] == "ready"
    service.ingest({"id": "d", "text": "Copper conducts electricity well."})
    service.chat("What conducts electricity?")
    text = service.client.get("/metrics").text
    assert 'warmrag_chat_requests_total{endpoint="chat",outcome="ok"} 1.0' in text
    assert 'warmrag_first_token_latency_seconds_bucket{le="0.05",warm="false"}' in text
    assert 'warmrag_first_token_latency_seconds_count{warm="false"} 1.0' in text
    assert "warmrag_documents 1.0" in text


def test_vllm_unreachable_is_503(start_service: ServiceFactory) -> None:
    """Fault injected: WARMRAG_VLLM_URL points at a port where nothing listens."""
    dead = f"http://127.0.0.1:{free_port()}"
    service = start_service(wait_ready=False, vllm_url=dead, vllm_startup_timeout_s=1)
    assert service.client.get("/health").status_code == 200
    ready = service.client.get("/ready")
    assert ready.status_code == 503 and ready.json()["ready"] is False
    service.ingest({"id": "d", "text": "Copper conducts electricity well."})
    for body in ({"question": "copper?"}, {"question": "copper?", "stream": True}):
        resp = service.client.post("/v1/chat", json=body)
        assert resp.status_code == 503, body
        # It names the component and says when to retry; the URL stays in the log.
        assert resp.json()["detail"] == "vLLM is unavailable"
        assert resp.json()["component"] == "vllm"
        assert resp.headers["retry-after"].isdigit()
        assert dead not in resp.text
    resp = service.client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert resp.status_code == 503
    assert resp.json()["error"]["message"] == "vLLM is unavailable"
    assert 'outcome="llm_unavailable"' in service.client.get("/metrics").text
