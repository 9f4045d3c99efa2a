"""vLLM's ``/metrics`` text, read into typed facts: the KV cache's shape and how full it is.

vLLM exports its ``CacheConfig`` as the labels of one info gauge,
``vllm:cache_config_info`` (every field ``str()``-ed, so an unset one reads ``"None"``;
one series per engine, each with the same labels but ``engine``), and the share of
KV blocks in use per engine as ``vllm:kv_cache_usage_perc`` (releases before the V1
engine called it ``vllm:gpu_cache_usage_perc``).

The text is read with prometheus_client's own parser, so quoting, escapes, comments
and label order are handled as Prometheus handles them, not by patterns that happen to
fit today's output. Where vLLM runs matters for one fact: vLLM-CPU sets
``kv_cache_memory_bytes`` from ``VLLM_CPU_KVCACHE_SPACE``, while GPU vLLM sizes the
cache from ``gpu_memory_utilization`` and leaves it ``None``; both report
``num_gpu_blocks``, which with ``block_size`` gives the capacity in tokens.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rag.llm.errors import LLMBadResponseError

CACHE_INFO = "vllm:cache_config_info"
KV_USAGE = "vllm:kv_cache_usage_perc"
#: The usage gauge's name before vLLM's V1 engine; read only where the new one is absent.
KV_USAGE_LEGACY = "vllm:gpu_cache_usage_perc"


class VLLMMetricsError(LLMBadResponseError):
    """vLLM's ``/metrics`` cannot be read, or lacks a fact warmrag needs of it."""

    public = "vLLM sent metrics warmrag cannot read"


class MissingMetricError(VLLMMetricsError):
    """A metric (or one of its labels) warmrag needs is not in vLLM's ``/metrics``."""

    def __init__(self, metric: str, detail: str) -> None:
        super().__init__(f"vLLM's /metrics has no {metric}: {detail}")
        self.metric = metric


class CacheCapacityUnknownError(VLLMMetricsError):
    """vLLM does not say how many KV blocks it has, so the cache's size in tokens is
    unknown (the warm budget cannot be set)."""


@dataclass(frozen=True)
class CacheFacts:
    """What ``vllm:cache_config_info`` says about the KV cache.

    ``None`` means vLLM reported the field as unset (``"None"``) or not at all.
    """

    block_size: int
    num_gpu_blocks: int | None
    kv_cache_memory_bytes: int | None
    enable_prefix_caching: bool | None

    @property
    def capacity_tokens(self) -> int | None:
        if self.num_gpu_blocks is None:
            return None
        return self.num_gpu_blocks * self.block_size

    def require_blocks(self) -> int:
        """The block count, which the warm budget needs; unknown is an error that
        says which facts vLLM did report."""
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        if self.kv_cache_memory_bytes is not None:
            raise CacheCapacityUnknownError(
                f"vLLM reports {self.kv_cache_memory_bytes:,} bytes of KV memory but no"
                " num_gpu_blocks, so the cache's size in tokens is unknown"
            )
        raise CacheCapacityUnknownError(
            "vLLM reports neither num_gpu_blocks nor kv_cache_memory_bytes, so the"
            " cache's size is unknown (has its engine finished starting?)"
        )


@dataclass(frozen=True)
class VLLMMetrics:
    """The parts of one ``/metrics`` reading that warmrag uses."""

    #: ``None`` when vLLM exports no ``vllm:cache_config_info``.
    cache: CacheFacts | None
    #: Share of KV blocks in use, the mean over engines, in 0..1;
    #: ``None`` when no usage gauge is exported.
    kv_usage: float | None

    def require_cache(self) -> CacheFacts:
        if self.cache is None:
            raise MissingMetricError(CACHE_INFO, "is vLLM started with --disable-log-stats?")
        return self.cache


def parse_vllm_metrics(text: str) -> VLLMMetrics:
    """Read a ``/metrics`` text; raise ``VLLMMetricsError`` if it is not Prometheus
    text or a cache label warmrag relies on is malformed."""
    samples = _samples_by_name(text)
    usage = samples.get(KV_USAGE) or samples.get(KV_USAGE_LEGACY)
    return VLLMMetrics(
        cache=_cache_facts(samples.get(CACHE_INFO, [])),
        kv_usage=_usage(usage) if usage else None,
    )


def _samples_by_name(text: str) -> dict[str, list[Sample]]:
    """Every sample, keyed by its own name (families without a ``# TYPE`` line are
    one per sample line, so collecting by family would split them)."""
    by_name: defaultdict[str, list[Sample]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                by_name[sample.name].append(sample)
    except (ValueError, IndexError) as exc:
        raise VLLMMetricsError(f"vLLM's /metrics is not Prometheus text: {exc}") from None
    return dict(by_name)


def _cache_facts(samples: list[Sample]) -> CacheFacts | None:
    """The first engine's labels: every engine repeats the same configuration (with
    data parallelism ``num_gpu_blocks`` is already the sum over engines)."""
    if not samples:
        return None
    labels = min(samples, key=lambda s: s.labels.get("engine", "")).labels
    block_size = _int_label(labels, "block_size")
    if block_size is None:
        raise MissingMetricError(f"{CACHE_INFO} label block_size", f"labels are {sorted(labels)}")
    if block_size <= 0:
        raise VLLMMetricsError(f"vLLM reports a KV block of {block_size} tokens")
    return CacheFacts(
        block_size=block_size,
        num_gpu_blocks=_int_label(labels, "num_gpu_blocks"),
        kv_cache_memory_bytes=_int_label(labels, "kv_cache_memory_bytes"),
        enable_prefix_caching=_bool_label(labels, "enable_prefix_caching"),
    )


def _int_label(labels: dict[str, str], name: str) -> int | None:
    raw = labels.get(name)
    if raw is None or raw == "None" or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise VLLMMetricsError(f"{CACHE_INFO} has {name}={raw!r}, not a whole number") from None


def _bool_label(labels: dict[str, str], name: str) -> bool | None:
    return {"True": True, "False": False}.get(labels.get(name, ""))


def _usage(samples: list[Sample]) -> float:
    """The mean over engines: with data parallelism each engine reports the share of
    its own blocks, while ``num_gpu_blocks`` is already their total."""
    values = [s.value for s in samples if math.isfinite(s.value)]
    return min(1.0, max(0.0, sum(values) / len(values))) if values else 0.0
