"""The fast-path tests on the CPUs this machine is not: once per kernel tier it has below its own,
each in a subprocess with ``ATEN_CPU_CAPABILITY`` and ``ONEDNN_MAX_CPU_ISA`` set.

torch picks its CPU kernels (and the int4 kernel's packed layout) by capability, and oneDNN its
bfloat16 products by tier (AVX2; AVX512_CORE, bfloat16 emulated; AVX512_CORE_BF16, native; AMX), each
rounding in its own way, so a fast path checked only where it was written can be wrong elsewhere, and
a pass's rows can round otherwise than steps. The tiers come from the CPU's flags
(``playground.models.cpu.onednn_tiers``): an AMX machine runs what a Zen 4 runs, a Zen 4 what a
Skylake-to-Ice-Lake Xeon runs, and every x86 machine the AVX2 and default kernels. The suite's own
run covers the CPU's highest tier.
"""
from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from playground.models.cpu import (
    CAPABILITY_FLAGS,
    CPUINFO,
    ONEDNN_TIERS,
    capabilities,
    cpu_flags,
    onednn_tiers,
    torch_capability,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FILES = ["tests/models/test_weights_check.py", "tests/models/test_int4.py", "tests/models/test_fast_path.py", "tests/models/test_lean_gemma.py",
         "tests/models/test_one_pass.py", "tests/models/test_batch_invariance.py"]
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
# By oneDNN tier. The VNNI tier adds int8 instructions to AVX512_CORE, which no product here uses, so
# it runs one test per product kind (dense bfloat16, the int4 kernel, a tree's attention), and none where
# ONEDNN_VERBOSE shows its products running the primitives AVX512_CORE's run (``twin``: on a Zen 4 both
# run gemm:jit:bf16, the same implementation at the same shapes and layouts); the
# lowest AVX-512 tier also runs the same-text sweep's quick mode (every draft, bfloat16 and int4).
ONE_PER_KIND = "one_pass_equals_steps or batched_rows or dense_product or tree_pass"
SELECT = {"SSE41": ("packed_plane or packed_in_slices or stack or rows_are_matched or kernel_multiplies "
                    "or (fast_paths_pass and bfloat16)"),
          "AVX2": KERNEL_SHAPES, "AVX512_CORE": KERNEL_SHAPES, "AVX512_CORE_VNNI": ONE_PER_KIND,
          "AVX512_CORE_BF16": KERNEL_SHAPES}
SAME_TEXT_TIERS = ("AVX512_CORE",)


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


def other_tiers(cpuinfo: Path = CPUINFO) -> list[tuple[str, str]]:
    """(torch capability, oneDNN tier) for every oneDNN tier the CPU described by ``cpuinfo`` has, less
    its highest (the suite's own run): an AMX machine runs what a Zen 4 runs (AVX512_CORE_BF16), a
    Zen 4 what an AVX-512 CPU without bfloat16 runs (AVX512_CORE, AVX512_CORE_VNNI), and each the
    AVX2 and default kernels. torch's capability is held to the tier's family, never above its own."""
    order = list(CAPABILITY_FLAGS)
    own = order.index(torch_capability().lower())
    allowed = capabilities(cpu_flags(cpuinfo))
    tiers = [(ONEDNN_TIERS[isa][0], isa) for isa in onednn_tiers(cpu_flags(cpuinfo))[:-1]]
    return [(cap, isa) for cap, isa in tiers if cap in allowed and order.index(cap) <= own]


def test_tiers_follow_the_flags(tmp_path):
    zen4 = AVX512 + " avx512_vnni"
    assert onednn_tiers(cpu_flags(plant(tmp_path, zen4))) == ("SSE41", "AVX2", "AVX512_CORE", "AVX512_CORE_VNNI",
                                                              "AVX512_CORE_BF16")
    assert onednn_tiers(cpu_flags(plant(tmp_path, zen4 + " amx_tile amx_bf16 amx_int8")))[-1] == "AVX512_CORE_AMX"
    assert onednn_tiers(cpu_flags(plant(tmp_path, AVX2_ONLY))) == ("SSE41", "AVX2")
    assert [isa for _, isa in other_tiers(plant(tmp_path, AVX2_ONLY))] == ["SSE41"]


# The products whose kernel oneDNN picks by tier (float32 products and attention are torch's own, picked by
# ATEN_CPU_CAPABILITY): bfloat16 linear layers at one, a few and many rows, and attention's batched products.
ONEDNN_PROBE = """
import torch
torch.set_num_threads(1)
for m in (1, 8, 64):
    torch.nn.functional.linear(torch.randn(m, 576, dtype=torch.bfloat16), torch.randn(1536, 576, dtype=torch.bfloat16))
torch.bmm(torch.randn(4, 8, 64, dtype=torch.bfloat16), torch.randn(4, 64, 8, dtype=torch.bfloat16))
torch.matmul(torch.randn(1, 3, 9, 64, dtype=torch.bfloat16), torch.randn(1, 3, 64, 9, dtype=torch.bfloat16))
"""


@functools.lru_cache(maxsize=None)
def onednn_kernels(capability: str, isa: str) -> tuple[str, ...]:
    """The oneDNN primitives (implementation, layouts, shapes; ONEDNN_VERBOSE's exec lines less their
    times) the probe's products run under ``capability`` and ``isa``."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "ONEDNN_MAX_CPU_ISA": isa, "ONEDNN_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", ONEDNN_PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return tuple(line.rsplit(",", 1)[0] for line in out.stdout.splitlines() if ",primitive,exec," in line)


def twin(tier: tuple[str, str], tiers: list[tuple[str, str]], kernels: Any) -> tuple[str, str] | None:
    """The first tier before ``tier`` in ``tiers`` that runs the same kernels (the same torch capability and
    the same oneDNN primitives, ``kernels(capability, isa)``): its sweep already ran what ``tier``'s would."""
    for other in tiers[:tiers.index(tier)]:
        if other[0] == tier[0] and kernels(*other) == kernels(*tier):
            return other
    return None


def test_a_tier_is_left_out_only_where_an_earlier_one_runs_its_kernels():
    kernels = {("avx512", "AVX512_CORE"): ("gemm:jit:bf16",), ("avx512", "AVX512_CORE_VNNI"): ("gemm:jit:bf16",),
               ("avx512", "AVX512_CORE_BF16"): ("brg_matmul:avx512_core_bf16",), ("avx2", "AVX2"): ("gemm:jit:bf16",)}
    tiers = list(kernels)
    found = {t: twin(t, tiers, lambda *t: kernels[t]) for t in tiers}
    assert found == {("avx512", "AVX512_CORE"): None, ("avx512", "AVX512_CORE_VNNI"): ("avx512", "AVX512_CORE"),
                     ("avx512", "AVX512_CORE_BF16"): None, ("avx2", "AVX2"): None}


@pytest.mark.parametrize("capability, isa", other_tiers())
def test_fast_path_tests_pass_on_other_kernels(capability, isa):
    same = twin((capability, isa), other_tiers(), onednn_kernels)
    if same is not None:  # measured here, on this CPU: the tier's products run the kernels ``same``'s ran
        kinds = sorted({line.split(",exec,cpu,", 1)[-1].split(",")[1] for line in onednn_kernels(capability, isa)})
        pytest.skip(f"ONEDNN_MAX_CPU_ISA={isa} runs the kernels {same[1]} runs (ATEN_CPU_CAPABILITY={capability}; "
                    f"oneDNN: {', '.join(kinds)} for every bfloat16 product, by ONEDNN_VERBOSE)")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "ONEDNN_MAX_CPU_ISA": isa}
    files = FILES[:2] if capability == "default" else FILES
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", SELECT[isa], *files],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]
    where = f"ATEN_CPU_CAPABILITY={capability} ONEDNN_MAX_CPU_ISA={isa}"
    assert result.returncode == 0, f"{where}: {summary}\n{result.stdout[-6000:]}"
    assert " passed" in summary and "failed" not in summary, summary
    if isa in SAME_TEXT_TIERS:
        sweep = subprocess.run([sys.executable, "-m", "playground.tools.same_text", "--quick", "--weights", "bfloat16,int4"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        lines = [line for line in sweep.stdout.splitlines() if "differing texts" in line]
        assert sweep.returncode == 0 and len(lines) == 2, f"{where}: {sweep.stdout[-3000:]}{sweep.stderr[-2000:]}"
        assert all("differing texts 0 of" in line for line in lines), lines
