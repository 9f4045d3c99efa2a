"""The CPU's features, and the vLLM-CPU settings they call for.

Measured on two machines of the same kind (docs/runtime notes): with ``avx512_bf16``
or ``amx_bf16`` a 1,100-token prefill in bfloat16 took about 1 s; on an AVX2-only
CPU bfloat16 is emulated and the same prefill took 33-48 s, against 7-9 s in
float32. Compiling the model took 4-5 minutes at start-up on the AVX2 CPU for
little TTFT gain, against about 2 minutes on the AVX-512 one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

Dtype = Literal["bfloat16", "float32", "float16"]
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class CpuFeatures:
    """The flags of the first processor in ``/proc/cpuinfo`` (all cores match)."""

    flags: frozenset[str]
    model_name: str = ""

    @classmethod
    def parse(cls, cpuinfo: str) -> CpuFeatures:
        flags: frozenset[str] = frozenset()
        model = ""
        for line in cpuinfo.splitlines():
            name, _, value = line.partition(":")
            name = name.strip()
            if name in ("flags", "Features") and not flags:
                flags = frozenset(value.split())
            elif name == "model name" and not model:
                model = value.strip()
        return cls(flags, model)

    @classmethod
    def read(cls, path: Path = Path("/proc/cpuinfo")) -> CpuFeatures:
        try:
            return cls.parse(path.read_text(errors="replace"))
        except OSError:
            return cls(frozenset())

    @property
    def bf16_in_hardware(self) -> bool:
        return any(flag in self.flags for flag in BF16_FLAGS)

    @property
    def avx512(self) -> bool:
        return "avx512f" in self.flags


@dataclass(frozen=True)
class VLLMCpuPlan:
    """Settings for a vLLM-CPU child and why each was chosen (shown by ``/ready``)."""

    dtype: Dtype
    enforce_eager: bool
    reason: str


def plan_for(
    cpu: CpuFeatures, *, dtype: Dtype | None = None, enforce_eager: bool | None = None
) -> VLLMCpuPlan:
    """Pick the dtype and compile mode for ``cpu``; a given value overrides the choice."""
    reasons: list[str] = []
    if dtype is None:
        if cpu.bf16_in_hardware:
            dtype = "bfloat16"
            reasons.append("bfloat16: the CPU has bf16 in hardware")
        else:
            dtype = "float32"
            reasons.append(
                f"float32: the CPU has none of {', '.join(BF16_FLAGS)} (bfloat16 would be"
                " emulated, several times slower)"
            )
    else:
        reasons.append(f"{dtype}: set by WARMRAG_VLLM_DTYPE")
    if enforce_eager is None:
        enforce_eager = not cpu.avx512
        reasons.append(
            "eager: no AVX-512 (compiling takes minutes at start-up for little gain)"
            if enforce_eager
            else "compiled: AVX-512 CPU"
        )
    else:
        reasons.append(
            f"{'eager' if enforce_eager else 'compiled'}: set by WARMRAG_VLLM_ENFORCE_EAGER"
        )
    return VLLMCpuPlan(dtype=dtype, enforce_eager=enforce_eager, reason="; ".join(reasons))
