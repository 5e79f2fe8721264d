"""What this CPU can run, read from the instructions it reports, never from torch's answer.

torch obeys ``ATEN_CPU_CAPABILITY`` as asked: on a CPU without AVX-512, ``avx512`` makes it run
AVX-512 code, and the process dies of an illegal instruction (SIGILL). So the kernel families that
may be asked for come from the CPU's own flags (``/proc/cpuinfo``, which the kernel clears for
instructions the OS does not enable), with torch's own rules for each family
(``ATen/native/DispatchStub.cpp``: AVX2 needs AVX2 and FMA3; AVX-512 needs AVX512F, VL, BW and DQ
and FMA3). A CPU that reports no flags (not x86, or no ``/proc``) offers the default kernels alone.
"""
from __future__ import annotations

from pathlib import Path

import torch

CPUINFO = Path("/proc/cpuinfo")
# torch's capability names (ATEN_CPU_CAPABILITY) and the flags each needs, lowest first.
CAPABILITY_FLAGS: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "avx2": frozenset({"avx2", "fma"}),
    "avx512": frozenset({"avx512f", "avx512vl", "avx512bw", "avx512dq", "fma"}),
}
# Flags of CPUs that multiply bfloat16 natively.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The instruction flags of the first processor in ``cpuinfo`` (empty when there are none)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[-1].split())
    return frozenset()


def capabilities(flags: frozenset[str]) -> tuple[str, ...]:
    """The torch kernel families a CPU with ``flags`` can run, lowest first."""
    return tuple(name for name, needs in CAPABILITY_FLAGS.items() if needs <= flags)


def has_native_bf16(flags: frozenset[str]) -> bool:
    return bool(NATIVE_BF16_FLAGS & flags)


def torch_capability() -> str:
    """The kernel family torch dispatches to in this process ("DEFAULT", "AVX2", "AVX512", ...);
    ``ATEN_CPU_CAPABILITY`` can lower it (or, on a CPU without it, raise it to a crash)."""
    return torch.backends.cpu.get_cpu_capability()


# oneDNN's kernel tiers (``ONEDNN_MAX_CPU_ISA``), lowest first, with the flags each needs and the torch
# capability it sits under. Each tier rounds bfloat16 products its own way (native bfloat16 from
# AVX512_CORE_BF16, AMX tiles from AVX512_CORE_AMX), so a CPU is tested on every tier it has.
ONEDNN_TIERS: dict[str, tuple[str, frozenset[str]]] = {
    "SSE41": ("default", frozenset({"sse4_1"})),
    "AVX2": ("avx2", CAPABILITY_FLAGS["avx2"]),
    "AVX512_CORE": ("avx512", CAPABILITY_FLAGS["avx512"]),
    "AVX512_CORE_VNNI": ("avx512", CAPABILITY_FLAGS["avx512"] | {"avx512_vnni"}),
    "AVX512_CORE_BF16": ("avx512", CAPABILITY_FLAGS["avx512"] | {"avx512_vnni", "avx512_bf16"}),
    "AVX512_CORE_AMX": ("avx512", CAPABILITY_FLAGS["avx512"] | {"avx512_vnni", "avx512_bf16", "amx_tile",
                                                                "amx_bf16", "amx_int8"}),
}


def onednn_tiers(flags: frozenset[str]) -> tuple[str, ...]:
    """The oneDNN tiers a CPU with ``flags`` can run, lowest first (its highest is what oneDNN picks
    by itself)."""
    return tuple(name for name, (_, needs) in ONEDNN_TIERS.items() if needs <= flags)
