"""The warmup strategies other than the default (``WARMRAG_WARMUP_STRATEGY``), against
the real vLLM: what each warms, and what it ignores."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rag.llm.server import VLLMServer
from tests.api.test_warmup import (
    DOCS,
    ZORN_BLUE,
    ZORN_Q,
    entry_for,
    reset_prefix_cache,
    seed,
)
from tests.conftest import Service, ServiceFactory
from warmup.models import SYNTHETIC_QUERIES

#: Three of the default eight: each is a cold prefill on the CPU, and three show what
#: the batch does as well as eight.
BATCH = SYNTHETIC_QUERIES[:3]


def seeded(start_service: ServiceFactory, strategy: str) -> Service:
    """A service with this strategy, the documents ingested and ZORN_Q seeded."""
    service = start_service(warmup_strategy=strategy, warmup_synthetic_queries=BATCH)
    service.ingest(*DOCS)
    service.warmup_cycle()
    seed(service, ZORN_Q)
    return service


def test_hot_queries_strategy_keeps_a_changed_context_stale(
    start_service: ServiceFactory,
) -> None:
    service = seeded(start_service, "hot_queries")
    old = entry_for(service, "what colour is the river zorn")
    sent = service.registry()["warm_requests_sent"]
    service.ingest(ZORN_BLUE)
    report = service.warmup_cycle()[0]
    assert report["kind"] == "kb_change" and report["entries_checked"] == 0
    assert service.registry()["pending_changes"] == 0, "the change was queued, not dropped"
    assert entry_for(service, "what colour is the river zorn")["fingerprint"] == old["fingerprint"]
    assert service.registry()["warm_requests_sent"] == sent, "a change caused a prefill"
    body = service.chat(ZORN_Q)
    assert any("blue" in p["text"] for p in body["passages"])
    assert body["cache"]["warm_hit"] is False  # the warm prefix still holds the old passage


def test_synthetic_strategy_sends_its_batch_and_registers_nothing(
    start_service: ServiceFactory, vllm: VLLMServer
) -> None:
    service = start_service(warmup_strategy="synthetic", warmup_synthetic_queries=BATCH)
    service.ingest(*DOCS)
    reset_prefix_cache(vllm)
    sent = service.registry()["warm_requests_sent"]
    reports = service.warmup_cycle()
    hot = next(r for r in reports if r["kind"] == "hot")
    assert hot["warm_requests"] == len(BATCH)
    assert hot["prefill_tokens"] > 0
    assert hot["prefill_tokens_by_reason"] == {"synthetic": hot["prefill_tokens"]}
    assert service.registry()["warm_requests_sent"] == sent + len(BATCH)
    body = service.chat(ZORN_Q)
    assert body["cache"]["warm_hit"] is False
    assert service.registry()["entries"] == []
    metrics = service.client.get("/metrics").text
    # the start-up batch and the cycle's
    assert f'warmrag_rewarm_total{{reason="synthetic"}} {2 * len(BATCH)}.0' in metrics


def test_hybrid_strategy_warms_seeds_and_the_synthetic_batch(
    start_service: ServiceFactory,
) -> None:
    service = seeded(start_service, "hybrid")
    entry = entry_for(service, "what colour is the river zorn")
    assert entry["cached_block_tokens"] >= 128
    metrics = service.client.get("/metrics").text
    # start-up batch (empty knowledge base) and the cycle's batch
    assert f'warmrag_rewarm_total{{reason="synthetic"}} {2 * len(BATCH)}.0' in metrics


def test_unknown_strategy_is_refused_at_start(start_service: ServiceFactory) -> None:
    with pytest.raises(ValidationError, match=r"warmup\.strategy"):
        start_service(warmup_strategy="everything")
