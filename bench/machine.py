"""Where a benchmark ran, recorded in every results.json and report.

The machine kind is not one CPU: AVX-512/AMX hosts prefill in bf16 five times or more
faster than AVX2-only ones. Results compare ratios within one run (against strategy 1
and the floor, side by side), never absolute times across runs; the record says which
machine a run's absolute numbers belong to."""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np
from pydantic import BaseModel

from rag.llm.cpu import CpuFeatures, plan_for

#: The flags that change vLLM-CPU's speed most (vector width, bf16 and matrix units).
NOTABLE_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
#: The memory probe's buffer, one line of each of its pages read (``MemoryLatency``).
PROBE_BYTES = 64 << 20
PAGE_BYTES = 4096
#: How long the probe leaves its buffer untouched before the second read.
IDLE_S = 1.0


class MemoryLatency(BaseModel):
    """Nanoseconds to read one line of each 4 KiB page of a 64 MiB buffer: right after it
    was read (``hot_ns``), and after it sat untouched for ``idle_s`` (``after_idle_ns``).

    Latency through the service depends on this as much as on the CPU model. A host of
    the kind most sections here ran on (a 2-core Xeon with AMX, L3 reported as 480
    MiB) read 9-15 ns a line hot and 460-990 ns after 1 s untouched on 2026-12-06, when a
    question's embedding took 5-7 ms back to back and 100-165 ms after a pause of 1 s;
    the same kind of host had measured 3.0-3.3 and 6.2 ms for those earlier that day
    (``docs/performance.md``). A run's absolute latencies belong to the host state it
    records.
    """

    hot_ns: float
    after_idle_ns: float
    idle_s: float

    @property
    def summary(self) -> str:
        return (
            f"memory {self.hot_ns:,.0f} ns a line hot, {self.after_idle_ns:,.0f} ns after "
            f"{self.idle_s:g} s untouched"
        )


def memory_latency(
    idle_s: float = IDLE_S, size: int = PROBE_BYTES, reads: int = 3
) -> MemoryLatency:
    """Probe ``MemoryLatency``: the median of ``reads`` hot reads, then one after
    ``idle_s`` asleep (a core kept busy instead loses as much: what matters is how long
    the buffer went untouched)."""
    buffer = np.ones(size, np.uint8)  # written: every page is backed before the reads
    lines = buffer[::PAGE_BYTES]

    def read_ns() -> float:
        started = time.perf_counter_ns()
        int(lines.sum())
        return (time.perf_counter_ns() - started) / len(lines)

    read_ns()
    hot = statistics.median(read_ns() for _ in range(reads))
    time.sleep(idle_s)
    return MemoryLatency(hot_ns=round(hot, 1), after_idle_ns=round(read_ns(), 1), idle_s=idle_s)


class Machine(BaseModel):
    cpu_model: str
    cores: int
    flags: list[str]
    vllm_dtype: str
    enforce_eager: bool
    arch: str
    memory: MemoryLatency | None = None  # None: not probed (runs before the probe)

    @property
    def summary(self) -> str:
        flags = ", ".join(self.flags) or "none of " + "/".join(NOTABLE_FLAGS)
        mode = "eager" if self.enforce_eager else "compiled"
        memory = f"; {self.memory.summary}" if self.memory else ""
        return (
            f"{self.cpu_model or 'unknown CPU'} ({self.arch}), {self.cores} cores, flags: "
            f"{flags}; no GPU, vLLM-CPU {self.vllm_dtype} ({mode}){memory}"
        )


def this_machine(
    enforce_eager: bool, cpu: CpuFeatures | None = None, probe_memory: bool = True
) -> Machine:
    """This machine's record; ``probe_memory`` takes ``IDLE_S`` and a moment more."""
    cpu = cpu or CpuFeatures.read()
    plan = plan_for(cpu, enforce_eager=enforce_eager or None)
    return Machine(
        cpu_model=cpu.model_name,
        cores=os.cpu_count() or 0,
        flags=[f for f in NOTABLE_FLAGS if f in cpu.flags],
        vllm_dtype=str(plan.dtype),
        enforce_eager=plan.enforce_eager,
        arch=platform.machine(),
        memory=memory_latency() if probe_memory else None,
    )
