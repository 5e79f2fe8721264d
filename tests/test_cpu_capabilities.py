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
         "tests/test_one_pass.py", "tests/test_batch_invariance.py"]
# What runs per capability (pytest -k): the fewest tests that still run every kernel shape the fast
# paths use, one test per shape. int4: the packed layout (whole and in slices), the kernel's weights, the self-check on its
# probe, one pass against steps bit for bit (SmolLM2 and Gemma), batched rows against single rows, a
# draft tree's 4D mask, cached steps, crops and reorders, one greedy speculative run against greedy,
# every beam candidate of a 4-row batch against a one-row pass over its path;
# bfloat16: the same, plus parity with transformers and hidden states for early exit; Gemma: its
# blocks against transformers and a tree pass. Left to the suite's own run: what is logic rather than
# a kernel (the self-check's refusals, the auto order, the cache growing past its block, reading the
# files' blocks), strategies on the lean path, the sampler's chi-square and the sliding window's 600
# positions (40 s in emulated bfloat16). The default kernels are scalar (the int4 product 20x slower
# than float32's, and auto never picks int4 there), so there only the int4 layout and the kernel's
# product with the files' weights run (what a wrong layout would fail; the int4 self-check's probe
# alone takes 30 s there), and the bfloat16 self-check.
KERNEL_SHAPES = ("packed_plane or packed_in_slices or stack or kernel_multiplies or fast_paths_pass or one_pass_equals_steps "
                 "or batched_rows or tree_pass or cached_steps_crops or logits_close or dense_product "
                 "or stepwise_attention or one_pass_equals_transformers or crop_and_verify or reorder_grows "
                 "or hidden_states or one_pass_and_steps_equal "
                 "or (speculative_equals_greedy_on_the_lean_path and early_exit and int4) "
                 "or (scores_as_its_path_alone and int4)")
SELECT = {"default": ("packed_plane or packed_in_slices or stack or rows_are_matched or kernel_multiplies "
                      "or (fast_paths_pass and bfloat16)"),
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
