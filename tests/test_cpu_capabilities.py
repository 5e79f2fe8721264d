"""The fast-path tests on the CPUs this machine is not: once per torch CPU capability it can
dispatch to besides its own, each in a subprocess with ``ATEN_CPU_CAPABILITY`` set.

torch picks its CPU kernels (and the int4 kernel's packed layout) by capability, so a fast path
checked only where it was written can be wrong elsewhere; here a developer on an AVX-512 machine
runs the AVX2 and default kernels too, and one on an AVX2 machine the default kernels. For AVX2
and the default kernels oneDNN is held to the same instructions (``ONEDNN_MAX_CPU_ISA``), so
bfloat16 matrix products are emulated as on a CPU without native bfloat16. The suite's own run
covers the native capability.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
FILES = ["tests/test_weights_check.py", "tests/test_int4.py", "tests/test_fast_path.py", "tests/test_lean_gemma.py"]
# What runs per capability (pytest -k). The chi-square over 20,000 draws tests the sampler on the lean
# paths' logits, not the kernels, and takes a minute. The default kernels are scalar (the int4 product
# 20x slower than float32's, a whole file of decodes half an hour), so there the int4 layout, the
# kernel's weights and the self-check with its refusals run: what a wrong layout or kernel would fail.
SELECT = {"default": ("blocks_read or packed_plane or stack or rows_are_matched or kernel_multiplies "
                      "or fast_paths_pass or reference or wrong or raises or missing"),
          "avx2": "not sampler_statistics", "avx512": "not sampler_statistics"}
ONEDNN_ISA = {"avx2": "AVX2", "default": "SSE41"}


def capability_under(name: str) -> str:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": name}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env=env, capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


def other_capabilities() -> list[str]:
    """The capabilities torch dispatches to here when asked (it falls back to the best it has for
    one the CPU lacks), less the one this process runs."""
    own = torch.backends.cpu.get_cpu_capability()
    return [name for name in ("default", "avx2", "avx512")
            if capability_under(name).lower() == name and name.upper() != own]


@pytest.mark.parametrize("capability", other_capabilities())
def test_fast_path_tests_pass_on_other_kernels(capability):
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    if capability in ONEDNN_ISA:
        env["ONEDNN_MAX_CPU_ISA"] = ONEDNN_ISA[capability]
    files = FILES[:2] if capability == "default" else FILES
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", SELECT[capability],
                             *files],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]
    assert result.returncode == 0, f"ATEN_CPU_CAPABILITY={capability}: {summary}\n{result.stdout[-6000:]}"
    assert " passed" in summary and "failed" not in summary, summary
