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
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from playground.models.cpu import CPUINFO, capabilities, cpu_flags, torch_capability

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FILES = ["tests/test_weights_check.py", "tests/test_int4.py", "tests/test_fast_path.py", "tests/test_lean_gemma.py",
         "tests/test_one_pass.py"]
# What runs per capability (pytest -k): the tests of the kernels' shapes, not of strategies or statistics.
# int4: the layout, the kernel's weights, one-row and many-row products (probe, parity, cached steps, crops,
# reorders, a draft tree's 4D mask); bfloat16: the lean forward's one pass, steps, crops, reorders, tree pass
# and hidden states against transformers; Gemma: its blocks, one pass and steps; a text cut into passes
# any way giving the same logits bit for bit (test_one_pass); the self-check with its
# refusals. Left to the suite's own run: the auto order's logic (it loads Gemma's int4 once more for a
# minute), strategies on the lean path (greedy, speculative, EAGLE, beam), the sampler's chi-square and
# the sliding window's 600 positions (the cache's masking, not a kernel; 40 s in emulated bfloat16). The default kernels are
# scalar (the int4 product 20x slower than float32's), so there only the int4 layout, the kernel's
# weights and the self-check with its refusals run: what a wrong layout or kernel would fail.
KERNEL_SHAPES = ("not sampler_statistics and not auto_picks and not sliding_window and not greedy_eagle "
                 "and not beam_search and not speculative_equals and not greedy_equals and not cli_takes")
SELECT = {"default": ("blocks_read or packed_plane or stack or rows_are_matched or kernel_multiplies "
                      "or fast_paths_pass or reference or wrong or raises or missing"),
          "avx2": KERNEL_SHAPES, "avx512": KERNEL_SHAPES}
ONEDNN_ISA = {"avx2": "AVX2", "default": "SSE41"}


def other_capabilities(cpuinfo: Path = CPUINFO) -> list[str]:
    """The capabilities the CPU described by ``cpuinfo`` can run (its own flags, never torch's answer:
    torch runs AVX-512 code when asked on a CPU without it, and dies of SIGILL), less the one this
    process runs."""
    own = torch_capability().lower()
    return [name for name in capabilities(cpu_flags(cpuinfo)) if name != own]


def plant(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nflags\t\t: {flags}\n")
    return path


AVX2_ONLY = "fpu sse sse2 ssse3 sse4_1 sse4_2 fma avx avx2 f16c bmi1 bmi2"  # an AMD EPYC without AVX-512
AVX512 = AVX2_ONLY + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16"


def test_an_avx2_cpu_is_offered_no_avx512(tmp_path):
    assert capabilities(cpu_flags(plant(tmp_path, AVX2_ONLY))) == ("default", "avx2")
    assert "avx512" not in other_capabilities(plant(tmp_path, AVX2_ONLY))


def test_capabilities_follow_torchs_rules(tmp_path):
    assert capabilities(cpu_flags(plant(tmp_path, AVX512))) == ("default", "avx2", "avx512")
    assert capabilities(cpu_flags(plant(tmp_path, AVX512.replace(" avx512bw", "")))) == ("default", "avx2")
    assert capabilities(cpu_flags(plant(tmp_path, AVX2_ONLY.replace(" fma", "")))) == ("default",)
    assert capabilities(cpu_flags(tmp_path / "missing")) == ("default",)  # no /proc/cpuinfo: default only
    assert other_capabilities(tmp_path / "missing") == ([] if torch_capability() == "DEFAULT" else ["default"])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the flags are x86 ones")
def test_this_cpu_runs_what_torch_picked_by_itself():
    """torch's own pick (no override) is the highest capability the flags allow: the reader and
    torch's detection agree on this machine."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().lower() == capabilities(cpu_flags())[-1], out.stderr[-2000:]


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
