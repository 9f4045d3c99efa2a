"""The machine record every benchmark run carries (``bench.machine``)."""

from __future__ import annotations

import time

import pytest

import bench.machine
from bench.machine import Machine, MemoryLatency, memory_latency, this_machine
from rag.llm.cpu import CpuFeatures

AMX = CpuFeatures(frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}), "Xeon")


def test_memory_latency_reads_hot_then_after_leaving_the_buffer_untouched() -> None:
    started = time.perf_counter()
    probed = memory_latency(idle_s=0.2, size=4 << 20)
    assert time.perf_counter() - started >= 0.2  # the second read waited
    assert probed.idle_s == 0.2
    # A line a page: a read that took no time, or timed the whole buffer, is not one.
    assert 0 < probed.hot_ns < 100_000
    assert 0 < probed.after_idle_ns < 100_000


def test_the_summary_says_the_memory_where_probed() -> None:
    probed = this_machine(True, AMX, probe_memory=False).model_copy(
        update={"memory": MemoryLatency(hot_ns=12.4, after_idle_ns=1480.0, idle_s=1.0)}
    )
    assert probed.summary.endswith("; memory 12 ns a line hot, 1,480 ns after 1 s untouched")
    assert "memory" not in this_machine(True, AMX, probe_memory=False).summary


def test_this_machine_probes_the_memory_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        bench.machine, "memory_latency", lambda: MemoryLatency(hot_ns=1, after_idle_ns=2, idle_s=0)
    )
    assert this_machine(True, AMX).memory == MemoryLatency(hot_ns=1, after_idle_ns=2, idle_s=0)


def test_a_record_from_before_the_probe_still_reads() -> None:
    old = {
        "cpu_model": "Xeon",
        "cores": 2,
        "flags": ["avx2"],
        "vllm_dtype": "bfloat16",
        "enforce_eager": True,
        "arch": "x86_64",
    }
    assert Machine.model_validate(old).memory is None
