"""Where each vLLM server's KV events come from: the settings, the embedded child's
sockets, one subscriber and index per server (nothing connects here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from api.config import Settings
from api.metrics import ServiceMetrics
from api.replicas import build_llm
from api.residency import build_residency, child_endpoint, external_endpoints
from rag.llm.kv_events import KVEventsEndpoint
from rag.llm.pool import ReplicaPool


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(data_dir=tmp_path, **values)  # type: ignore[arg-type]


def test_external_endpoints_take_the_next_port_for_replays_unless_named(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        vllm_url="http://a:8000,http://b:8000",
        vllm_kv_events_endpoints="tcp://a:5557, tcp://b:6000|tcp://b:7000",
    )
    assert external_endpoints(s) == [
        KVEventsEndpoint("tcp://a:5557", "tcp://a:5558"),
        KVEventsEndpoint("tcp://b:6000", "tcp://b:7000"),
    ]


@pytest.mark.parametrize(
    ("endpoints", "problem"),
    [
        ("http://a:5557", "not a ZMQ endpoint"),
        ("tcp://a", "not a ZMQ endpoint like tcp://host:5557"),
        ("tcp://a:5557,tcp://b:5557", "lists 2 endpoints for 1"),
    ],
)
def test_bad_endpoints_are_refused_with_what_is_wrong(
    tmp_path: Path, endpoints: str, problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        settings(tmp_path, vllm_url="http://a:8000", vllm_kv_events_endpoints=endpoints)


def test_the_child_uses_sockets_in_its_folder_unless_the_path_is_too_long(
    tmp_path: Path,
) -> None:
    endpoint = child_endpoint(tmp_path / "vllm")
    assert endpoint is not None and endpoint.publish.startswith("ipc://")
    assert endpoint.replay is not None and str(tmp_path) in endpoint.replay
    assert child_endpoint(tmp_path / ("x" * 120)) is None


def test_one_index_and_subscriber_per_replica(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        vllm_url="http://a:8000,http://b:8000",
        vllm_kv_events_endpoints="tcp://a:5557,tcp://b:5557",
    )
    llm = build_llm(s, s.vllm_urls, ServiceMetrics().replicas)
    residency = build_residency(s, llm, None)
    assert residency is not None
    assert sorted(residency.tracker.indexes) == ["a:8000", "b:8000"]
    assert isinstance(llm, ReplicaPool)
    residency.tracker.indexes["b:8000"].track("x", [1])  # warmed on b, router asked
    assert llm.where("x") == "b:8000"
    assert [sub.endpoint.publish for sub in residency.subscribers] == [
        "tcp://a:5557",
        "tcp://b:5557",
    ]
    off = settings(tmp_path, vllm_url="http://a:8000", vllm_kv_events_endpoints="tcp://a:5557")
    off = off.model_copy(update={"warmup": off.warmup.model_copy(update={"residency": False})})
    assert build_residency(off, llm, None) is None
    none = settings(tmp_path, vllm_url="http://a:8000")
    assert (
        build_residency(none, build_llm(none, none.vllm_urls, ServiceMetrics().replicas), None)
        is None
    )
