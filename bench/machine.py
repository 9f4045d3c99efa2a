"""Where a benchmark ran, recorded in every results.json and report.

The machine kind is not one CPU: AVX-512/AMX hosts prefill in bf16 five times or more
faster than AVX2-only ones. Results compare ratios within one run (against strategy 1
and the floor, side by side), never absolute times across runs; the record says which
machine a run's absolute numbers belong to."""

from __future__ import annotations

import os
import platform

from pydantic import BaseModel

from rag.llm.cpu import CpuFeatures, plan_for

#: The flags that change vLLM-CPU's speed most (vector width, bf16 and matrix units).
NOTABLE_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


class Machine(BaseModel):
    cpu_model: str
    cores: int
    flags: list[str]
    vllm_dtype: str
    enforce_eager: bool
    arch: str

    @property
    def summary(self) -> str:
        flags = ", ".join(self.flags) or "none of " + "/".join(NOTABLE_FLAGS)
        mode = "eager" if self.enforce_eager else "compiled"
        return (
            f"{self.cpu_model or 'unknown CPU'} ({self.arch}), {self.cores} cores, flags: "
            f"{flags}; no GPU, vLLM-CPU {self.vllm_dtype} ({mode})"
        )


def this_machine(enforce_eager: bool, cpu: CpuFeatures | None = None) -> Machine:
    cpu = cpu or CpuFeatures.read()
    plan = plan_for(cpu, enforce_eager=enforce_eager or None)
    return Machine(
        cpu_model=cpu.model_name,
        cores=os.cpu_count() or 0,
        flags=[f for f in NOTABLE_FLAGS if f in cpu.flags],
        vllm_dtype=str(plan.dtype),
        enforce_eager=plan.enforce_eager,
        arch=platform.machine(),
    )
