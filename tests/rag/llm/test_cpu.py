"""The vLLM-CPU dtype and compile mode follow the CPU's flags (issue: bf16 emulated
on AVX2-only CPUs made a 1,100-token prefill 33-48 s instead of 7-9 s)."""

from __future__ import annotations

from pathlib import Path

from rag.llm.cpu import CpuFeatures, plan_for

AMX_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C
flags\t\t: fpu sse sse2 avx avx2 avx512f avx512bw avx512_bf16 amx_bf16 amx_tile
"""
AVX2_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx avx2 fma f16c
"""


def test_bf16_hardware_gets_bfloat16_compiled() -> None:
    cpu = CpuFeatures.parse(AMX_CPUINFO)
    assert cpu.bf16_in_hardware and cpu.model_name.startswith("Intel")
    plan = plan_for(cpu)
    assert (plan.dtype, plan.enforce_eager) == ("bfloat16", False)
    assert "bf16 in hardware" in plan.reason


def test_avx2_only_gets_float32_eager() -> None:
    cpu = CpuFeatures.parse(AVX2_CPUINFO)
    assert not cpu.bf16_in_hardware and not cpu.avx512
    plan = plan_for(cpu)
    assert (plan.dtype, plan.enforce_eager) == ("float32", True)
    assert "emulated" in plan.reason


def test_settings_override_the_choice() -> None:
    plan = plan_for(CpuFeatures.parse(AVX2_CPUINFO), dtype="bfloat16", enforce_eager=False)
    assert (plan.dtype, plan.enforce_eager) == ("bfloat16", False)
    assert "WARMRAG_VLLM_DTYPE" in plan.reason and "WARMRAG_VLLM_ENFORCE_EAGER" in plan.reason


def test_unreadable_cpuinfo_is_the_safe_choice(tmp_path: Path) -> None:
    plan = plan_for(CpuFeatures.read(tmp_path / "missing"))
    assert plan.dtype == "float32"
