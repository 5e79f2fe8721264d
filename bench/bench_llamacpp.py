"""Our traced decode (playground.engine) side by side with llama.cpp on the same GGUF file.

Same model file, prompt token ids, token count and thread count; the two take turns (ours, then
llama.cpp, repeated) so a change of machine load hits both, and the medians are compared. Prints
tok/s of each and the ratio ours / llama.cpp for greedy and for sampling (goal: >= 0.5), then the
cost of verifying 2, 4 and 8 tokens in one forward pass, in plain one-token steps.

llama.cpp runs through llama-cpp-python's bindings (its own sampler, so greedy and top-p sampling
are both measured as generation, prompt prefill included) in a worker process fed over a pipe, so
neither side shares threads or memory with the other. On first use the script makes a bench-only
virtual environment (``.bench-venv``), fetches llama-cpp-python's sdist from PyPI and builds only
the ``llama`` shared library from the llama.cpp sources it vendors: 190 s wall clock on two cores,
about 4 minutes for the whole first run with the download (installing the package with pip, which
builds more of llama.cpp, was about 50 minutes). The build is cached under ``.bench-venv`` by
version, cmake flags and CPU (it is built for this CPU's instructions), so later runs start at once.

``--isa avx2`` compares the two as on a CPU with AVX2 but no AVX-512 (or AMX, or AVX-VNNI): our side
runs torch's AVX2 kernels (the script restarts itself with ``ATEN_CPU_CAPABILITY=avx2`` and
``ONEDNN_MAX_CPU_ISA=AVX2``), and llama.cpp is a second build (224 s on two cores), cached beside the
first, for AVX2, FMA, F16C and BMI2 only (``GGML_NATIVE=OFF``, no CPU-variant dispatch), whose
libraries are disassembled before every run: the script refuses to report if they hold an AVX-512,
AMX or VNNI instruction. The header line names the capability torch runs on and llama.cpp's
instruction flags.

``--export-check`` times nothing: it checks the project's llama.cpp export (issue 60). It builds llama.cpp's
plain completion tool, ``llama-completion`` (tools/completion; this version's ``llama-cli`` is the chat
client), from the same sources and with the same instruction flags, statically linked, cached beside the
library build (477 s here, on two cores other jobs shared). Then for a few SmolLM2 runs (greedy, and sampling at
temperature 0 with a repetition penalty, with top-k and min-p, with presence and frequency penalties), on
two raw prompts, it runs ours in float32, exports the run's llama-cli flags from its trace
(``playground.engines.formats.export_trace``) and runs the tool with exactly those flags, ``--temp 0``, the
same prompt, token count and seed, on the GGUF file: it prints how far the two texts agree and, where they
part, our top-2 margin at that step (llama.cpp computes on the file's quantized weights, ours on their
dequantized values, so a near tie may go either way). Its exit status is 1 if the tool failed or refused an
exported flag.

    .venv/bin/python bench/bench_llamacpp.py [--quick] [--isa native|avx2] [--dtype float32,auto] [--threads 2] [--tokens 64]
    .venv/bin/python bench/bench_llamacpp.py --export-check [--tokens 64] [--threads 2]
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playground import models  # noqa: E402
from playground.engine import Request, in_dtype, run  # noqa: E402
from playground.engines.formats import export_trace  # noqa: E402

BENCH_VENV = ROOT / ".bench-venv"
PROMPT = "Write a long, detailed story about a dragon who learns to bake bread."
SAMPLING = {"temperature": 0.9, "top_p": 0.95}

# llama.cpp as llama-cpp-python 0.3.36 vendors it. Only its `llama` shared library is built (with
# cmake, straight from the sdist's vendor/llama.cpp), not what `pip install` builds (about 50
# minutes on two cores). The bindings are pure Python and load the library that LLAMA_CPP_LIB_PATH
# names, so they run from the unpacked sdist without being installed.
LLAMA_CPP_PYTHON = "0.3.36"
# The instruction-set options of the vendored ggml (ggml/CMakeLists.txt, ggml/src/ggml-cpu/CMakeLists.txt).
# avx2 is ggml's own "haswell" CPU variant: with GGML_NATIVE off each instruction set is a compiler flag
# (-mavx2, -mfma, ...), and everything past AVX2 is named off. GGML_CPU_ALL_VARIANTS and GGML_BACKEND_DL
# stay off, so one CPU backend is linked in and nothing picks a variant by the CPU's features at run time.
ISA_FLAGS = {
    "native": ["-DGGML_NATIVE=ON"],
    "avx2": ["-DGGML_NATIVE=OFF", "-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
             "-DGGML_F16C=ON", "-DGGML_BMI2=ON", "-DGGML_AVX_VNNI=OFF", "-DGGML_AVX512=OFF",
             "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AMX_TILE=OFF",
             "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF", "-DGGML_CPU_ALL_VARIANTS=OFF", "-DGGML_BACKEND_DL=OFF"],
}
OTHER_FLAGS = ["-DBUILD_SHARED_LIBS=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_COMMON=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF"]
# --export-check: llama.cpp's plain completion tool from the same sources. In this version tools/completion
# builds llama-completion, one completion of a raw prompt; llama-cli (tools/cli) is the chat client on the
# server's code. Linked statically (BUILD_SHARED_LIBS off), so the binary needs no library path.
TOOL = "llama-completion"
TOOL_FLAGS = ["-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_COMMON=ON",
              "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
              "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF"]
# Added to the exported flags where the tool's --help lists them: a raw prompt, no chat (the tool turns
# conversation on when the model has a chat template), no warm-up run, plain output of the new text only.
TOOL_RUN_FLAGS = ["-no-cnv", "--no-warmup", "--simple-io", "--no-display-prompt"]
# The check's context size.
CONTEXT = 1024
# A top-2 probability margin below which a parting is put down to the two sides' numbers.
NEAR_TIE = 0.1
# The prompts of the check: the bench's open-ended one, and one whose continuation the model is surer of.
EXPORT_PROMPTS = (PROMPT, "The history of the Roman Empire begins with")
# The runs checked (our strategy and params); each is greedy in effect, as the check runs llama.cpp at --temp 0.
EXPORT_CHECKS = {
    "greedy": ("greedy", {}),
    "T 0, repetition penalty 1.3": ("sampling", {"temperature": 0.0, "repetition_penalty": 1.3}),
    "T 0, top-k 40, min-p 0.05": ("sampling", {"temperature": 0.0, "top_k": 40, "min_p": 0.05}),
    "T 0, presence 0.5, frequency 0.5": ("sampling", {"temperature": 0.0, "presence_penalty": 0.5,
                                                       "frequency_penalty": 0.5}),
}
# Our side under --isa avx2: torch's kernels for AVX2 (read when torch is imported) and oneDNN's up to AVX2.
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# What an AVX2-only build must not hold, in objdump's AT&T syntax: AVX-512's registers (zmm, the mask
# registers k0-k7, xmm/ymm 16-31), AMX's tile instructions, and the VNNI / BF16 dot products (AVX-512's or
# AVX-VNNI's).
BEYOND_AVX2 = re.compile(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\b(ld|st)?tile|\btdp|vpdpbu|vpdpws|"
                         r"vdpbf16ps|vcvtne2?ps2bf16")


def cmake_flags(isa: str) -> list[str]:
    """The cmake flags of the build for `isa` (native's are those the cache key has always hashed)."""
    return ["-DCMAKE_BUILD_TYPE=Release", *ISA_FLAGS[isa], *OTHER_FLAGS]

# The worker: one llama.cpp model, one JSON request per line in, one JSON answer per line out.
WORKER = r"""
import json, sys, time
from llama_cpp import Llama
from llama_cpp import llama_cpp as lib
path, threads = sys.argv[1], int(sys.argv[2])
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=1024, n_batch=512,
            verbose=False, seed=0)
print(json.dumps({"ready": True, "system_info": lib.llama_print_system_info().decode()}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    llm.reset()
    kw = dict(temp=job["temperature"], top_p=job["top_p"], top_k=0, min_p=0.0) if job["sample"] else dict(temp=0.0)
    start, count = time.perf_counter(), 0
    for token in llm.generate(job["prompt_ids"], reset=True, **kw):
        count += 1
        if count == job["n"]:
            break
    print(json.dumps({"seconds": time.perf_counter() - start, "tokens": count}), flush=True)
"""


def _build_dir(isa: str, flags: list[str] | None = None, name: str = "build") -> Path:
    """Where the build is cached: its key is the sources' version, the cmake flags and the CPU's
    features (GGML_NATIVE compiles for them; another CPU may lack an instruction)."""
    cpu = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    flags = cmake_flags(isa) if flags is None else flags
    key = hashlib.sha256("\n".join([LLAMA_CPP_PYTHON, *flags, cpu]).encode()).hexdigest()[:12]
    return BENCH_VENV / f"{name}-{LLAMA_CPP_PYTHON}-{key}"


def cmake_build(src: Path, build: Path, flags: list[str], target: str) -> float | None:
    """Configure and build `target` into `build` unless a finished build is there; the seconds it took, or
    None when it was cached. The compiler's chatter goes to build/build.log, kept for a failed build."""
    if (build / "built").exists():
        return None
    start = time.perf_counter()
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    build.mkdir(parents=True, exist_ok=True)
    with open(build / "build.log", "w") as log:
        for step in (["cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(build), *generator, *flags],
                     ["cmake", "--build", str(build), "--target", target, "-j", str(os.cpu_count())]):
            if subprocess.run(step, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                raise RuntimeError(f"building llama.cpp's {target} failed; see {build / 'build.log'}")
    seconds = time.perf_counter() - start
    (build / "built").write_text(f"{seconds:.0f} s\n")
    return seconds


def beyond_avx2(lib_dir: Path) -> dict[str, int]:
    """Per shared library in `lib_dir`, how many of its disassembled instructions need more than AVX2."""
    if not shutil.which("objdump"):
        raise RuntimeError("objdump (binutils) is needed to check the AVX2 build: apt-get install -y binutils")
    counts = {}
    for lib in sorted(lib_dir.glob("*.so")):
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True,
                             check=True).stdout
        # symbol names (<...>) are dropped, so a function's name cannot read as an instruction
        counts[lib.name] = sum(1 for line in asm.splitlines() if BEYOND_AVX2.search(re.sub(r"<[^>]*>", "", line)))
    if "libggml-cpu.so" not in counts:
        raise RuntimeError(f"no libggml-cpu.so in {lib_dir}")
    return counts


def bench_python() -> Path:
    """The bench-only venv's python (made on first use)."""
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    return python


def sources(python: Path) -> Path:
    """llama-cpp-python's unpacked sdist in .bench-venv (fetched on first use); llama.cpp is its vendor/llama.cpp."""
    src = BENCH_VENV / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    if not src.is_dir():
        print(f"fetching llama-cpp-python {LLAMA_CPP_PYTHON}'s sources into .bench-venv", flush=True)
        with tempfile.TemporaryDirectory(dir=BENCH_VENV) as tmp:  # renamed when whole, so never half there
            subprocess.run([str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", tmp], check=True)
            with tarfile.open(Path(tmp) / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz") as tar:
                tar.extractall(tmp, filter="data")
            (Path(tmp) / src.name).rename(src)
    return src


def llama_cpp_worker(isa: str) -> tuple[Path, dict[str, str]]:
    """The python and environment that run the bindings on our build of llama.cpp (made on first use)."""
    python = bench_python()
    if subprocess.run([str(python), "-c", "import numpy, diskcache, jinja2, typing_extensions"],
                      capture_output=True).returncode != 0:  # what the bindings import, as wheels
        subprocess.run([str(python), "-m", "pip", "install", "-q", "numpy", "diskcache", "jinja2", "typing-extensions"],
                       check=True)
    src = sources(python)
    build, flags = _build_dir(isa), cmake_flags(isa)
    if not (build / "built").exists():
        print(f"building llama.cpp's shared library ({isa}) into .bench-venv (about 3 minutes on two cores)",
              flush=True)
        print(f"built llama.cpp in {cmake_build(src, build, flags, 'llama'):.0f} s", flush=True)
    if isa == "avx2":  # checked on every run, not only after the build: the numbers depend on it
        counts = beyond_avx2(build / "bin")
        if any(counts.values()):
            raise RuntimeError(f"the AVX2 build of llama.cpp in {build} holds instructions past AVX2 "
                               f"(AVX-512, AMX or VNNI; per library: {counts}); not reporting")
        print(f"llama.cpp AVX2 build checked: no AVX-512, AMX or VNNI instruction in {', '.join(counts)}", flush=True)
    # the libraries find each other through LD_LIBRARY_PATH too: the build's RUNPATH is the absolute
    # folder it was built in, which a moved or copied .bench-venv no longer has
    lib = str(build / "bin")
    return python, {**os.environ, "PYTHONPATH": str(src), "LLAMA_CPP_LIB_PATH": lib,
                    "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")]))}


class LlamaCpp:
    """A llama.cpp worker process holding one GGUF model."""

    def __init__(self, path: Path, threads: int, isa: str, worker: tuple[Path, dict[str, str]]):
        python, env = worker
        self.proc = subprocess.Popen([str(python), "-c", WORKER, str(path), str(threads)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.system_info = self._read()["system_info"].strip()
        if isa == "avx2" and re.search(r"AVX512|AVX_VNNI|AMX", self.system_info):
            self.close()
            raise RuntimeError(f"llama.cpp's AVX2 build reports more than AVX2: {self.system_info}; not reporting")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=30)
            signal_name = f" (signal {-code}{', SIGILL: an instruction this CPU lacks or refuses' if code == -4 else ''})" \
                if code < 0 else ""
            raise RuntimeError(f"the llama.cpp worker stopped with exit status {code}{signal_name}; "
                               "its message, if any, is above")
        return json.loads(line)

    def tokens_per_second(self, prompt_ids: list[int], n: int, sample: bool) -> float:
        job = {"prompt_ids": prompt_ids, "n": n, "sample": sample, **SAMPLING}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        return out["tokens"] / out["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def ours_tokens_per_second(store: models.ModelStore, key: str, n: int, sample: bool, dtype: str) -> float:
    req = Request(key, "sampling" if sample else "greedy", PROMPT, SAMPLING if sample else {}, seed=0,
                  max_new_tokens=n, dtype=dtype)
    return run(store, req).timing.tokens_per_second


def side_by_side(store: models.ModelStore, key: str, args: argparse.Namespace,
                 worker: tuple[Path, dict[str, str]]) -> None:
    dtypes = args.dtype.split(",")
    lm = store.get(key)
    prompt_ids = lm.encode(PROMPT)
    names = {d: in_dtype(lm, d).weights for d in dtypes}
    cpp = LlamaCpp(models.gguf_path(key), args.threads, args.isa, worker)
    print(f"llama.cpp reports {cpp.system_info}", flush=True)
    try:
        for sample in (False, True):
            for d in dtypes:  # warm-up of every side
                ours_tokens_per_second(store, key, 4, sample, d)
            cpp.tokens_per_second(prompt_ids, 4, sample)
            ours: dict[str, list[float]] = {d: [] for d in dtypes}
            theirs = []
            for _ in range(args.repeats):
                for d in dtypes:
                    ours[d].append(ours_tokens_per_second(store, key, args.tokens, sample, d))
                theirs.append(cpp.tokens_per_second(prompt_ids, args.tokens, sample))
            t = statistics.median(theirs)
            for d in dtypes:
                o = statistics.median(ours[d])
                print(f"{key:14s} {'sampling' if sample else 'greedy':9s} ours ({names[d]:8s}) {o:6.1f} tok/s   "
                      f"llama.cpp {t:6.1f} tok/s   ratio ours/llama.cpp {o / t:5.2f}   "
                      f"(runs: ours {_list(ours[d])}; llama.cpp {_list(theirs)})", flush=True)
    finally:
        cpp.close()


def verify_costs(store: models.ModelStore, key: str, args: argparse.Namespace) -> None:
    """Time of one forward over G tokens after a cached prompt, in one-token steps (median)."""
    lm = in_dtype(store.get(key), args.dtype.split(",")[-1])
    prompt = torch.tensor([lm.encode(PROMPT)], device=lm.device)
    cache = lm.forward(prompt).cache

    def cost(g: int) -> float:
        times = []
        for _ in range(args.verify_repeats):
            start = time.perf_counter()
            lm.forward(torch.full((1, g), 42, device=lm.device), cache)
            times.append(time.perf_counter() - start)
            cache.crop(-g)
        return statistics.median(times)

    step = cost(1)
    shown = "   ".join(f"{g} tokens {cost(g) / step:4.2f} steps" for g in (2, 4, 8))
    print(f"{key:14s} verify ({lm.weights}): one step {1000 * step:5.1f} ms   {shown}", flush=True)


def completion_tool(isa: str) -> Path:
    """llama.cpp's completion tool, built (on first use) from the sources the library comes from, with the
    library build's instruction flags; cached beside it under the same kind of key."""
    src = sources(bench_python())
    flags = ["-DCMAKE_BUILD_TYPE=Release", *ISA_FLAGS[isa], *TOOL_FLAGS]
    build = _build_dir(isa, flags, "tool")
    if not (build / "built").exists():
        print(f"building llama.cpp's {TOOL} ({isa}) into .bench-venv", flush=True)
    seconds = cmake_build(src, build, flags, TOOL)
    took = f"built in {seconds:.0f} s" if seconds is not None else f"cached, built in {(build / 'built').read_text().strip()}"
    version = subprocess.run([str(build / "bin" / TOOL), "--version"], capture_output=True, text=True)
    print(f"{TOOL} ({took}): {(version.stdout + version.stderr).strip().splitlines()[0]}", flush=True)
    return build / "bin" / TOOL


def quantization(path: Path) -> str:
    """The tensor types of a GGUF file, most common first (e.g. 'Q4_1 x 182, F32 x 61')."""
    from gguf import GGUFReader

    counts: dict[str, int] = {}
    for tensor in GGUFReader(path).tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    return ", ".join(f"{name} x {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def exported_flags(trace: dict) -> tuple[list[str], list[str]]:
    """The flags of the trace's llama-cli export as the exporter writes them (its text, split as a shell
    would, with the program and its `-m MODEL.gguf` taken off), and its 'cannot express' lines."""
    text = export_trace(trace)["llama-cli"]
    lines = text.splitlines()
    # the text is one flag a line, each line but the last ending in a backslash
    words = shlex.split("\n".join(line for line in lines if not line.startswith("#")).replace("\\\n", " "))
    if words[:3] != ["llama-cli", "-m", "MODEL.gguf"]:
        raise RuntimeError(f"the llama-cli export does not start with 'llama-cli -m MODEL.gguf': {text!r}")
    return words[3:], [line for line in lines if line.startswith("#")]


def decision_margin(step: dict) -> tuple[float, str]:
    """The top-2 probability gap of the distribution our argmax was taken on (the chain's last stage before
    temperature, which at T 0 keeps only the top; else the model's own), and the two tokens."""
    probs = [c["raw_prob"] for c in step["candidates"]]
    for stage in step.get("stages", []):
        if stage["name"] == "temperature":
            break
        probs = stage["probs"]
    ranked = sorted(((p or 0.0, c["text"]) for p, c in zip(probs, step["candidates"])), reverse=True)
    (p1, t1), (p2, t2) = ranked[0], ranked[1]
    return p1 - p2, f"{t1!r} {p1:.4f} vs {t2!r} {p2:.4f}"


def run_tool(cmd: list[str]) -> tuple[subprocess.CompletedProcess, str | None]:
    """The tool's run, and the flag its argument parser refused (None if none)."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    refused = re.search(r'(?:error while handling argument|invalid argument:?) "?([^"\s]+)', done.stderr)
    return done, refused.group(1) if done.returncode != 0 and refused else None


def compare(trace: dict, theirs: str) -> bool:
    """Print where llama.cpp's text and our run's part, with our top-2 margin at that step; whether equal."""
    ours, tokens = trace["text"], trace["tokens"]
    split = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    at, ends = len(tokens), 0  # our token holding the split: the first whose end passes it
    for k, token in enumerate(tokens):
        ends += len(token["text"])
        if ends > split:
            at = k
            break
    same = ours == theirs
    print(f"  agree on {split} characters of our {len(ours)} (llama.cpp wrote {len(theirs)}), i.e. on our first "
          f"{at} of {len(tokens)} tokens; full texts {'EQUAL' if same else 'differ'}", flush=True)
    if not same:
        print(f"  ours      ...{ours[max(0, split - 30):split]!r} | {ours[split:split + 30]!r}\n"
              f"  llama.cpp ...{theirs[max(0, split - 30):split]!r} | {theirs[split:split + 30]!r}", flush=True)
        if at < len(trace["steps"]):
            gap, which = decision_margin(trace["steps"][at])
            hint = "" if gap < NEAR_TIE else ("; not a near tie: a sampler difference, or the tokens parted a step "
                                              "or so before the characters")
            print(f"  our step {at}: top-2 margin {gap:.4f} ({which}){hint}", flush=True)
    return same


def export_check(store: models.ModelStore, key: str, args: argparse.Namespace) -> bool:
    """Per setting: our run (float32), its exported llama-cli flags run by llama.cpp's completion tool at
    --temp 0 on the same GGUF, raw prompt and token count, and where the two texts part. False when the tool
    failed or refused a flag."""
    tool, gguf = completion_tool(args.isa), models.gguf_path(key)
    helptext = subprocess.run([str(tool), "--help"], capture_output=True, text=True)
    extra = [f for f in TOOL_RUN_FLAGS
             if re.search(rf"(^|[\s,]){re.escape(f)}([\s,]|$)", helptext.stdout + helptext.stderr, re.M)]
    print(f"{key}: {gguf.name} holds {quantization(gguf)} (llama.cpp computes on these; our float32 weights are "
          f"their dequantized values); {args.tokens} new tokens; added to every export: {' '.join(extra)}", flush=True)
    ok, equal, refusals = True, 0, set()
    for (name, (strategy, params)), prompt in itertools.product(EXPORT_CHECKS.items(), EXPORT_PROMPTS):
        trace = run(store, Request(key, strategy, prompt, params, seed=0, max_new_tokens=args.tokens, chat=False,
                                   dtype="float32")).to_dict()
        flags, cannot = exported_flags(trace)
        print(f"\n[{name}; prompt {prompt!r}] exported: {shlex.join(flags)}", flush=True)
        for line in cannot:
            print(f"  {line}")
        tail = ["-p", prompt, "-n", str(args.tokens), "--temp", "0", "--seed", str(trace["seed"]),
                "-t", str(args.threads), "-c", str(CONTEXT), *extra]
        done, refused = run_tool([str(tool), "-m", str(gguf), *flags, *tail])
        if refused is not None:
            ok = False
            refusals.add(refused)
            value = flags[flags.index(refused) + 1] if refused in flags[:-1] else None
            print(f"  REFUSED by {TOOL}: {refused} {value} ({done.stderr.strip().splitlines()[0]})", flush=True)
        if done.returncode != 0:
            ok = False
            print(f"  {TOOL} FAILED (exit {done.returncode}): {shlex.join([str(tool), '-m', str(gguf), *flags, *tail])}"
                  f"\n  stderr tail: {done.stderr[-800:]}", flush=True)
            continue
        # the tool ends its output with two newlines, after " [end of text]\n" where the model ended the text
        equal += compare(trace, done.stdout.removesuffix("\n\n").removesuffix(" [end of text]\n"))
    refused_text = f"flags refused: {', '.join(sorted(refusals))}" if refusals else "no flag refused"
    print(f"\nexport check {key}: {equal} of {len(EXPORT_CHECKS) * len(EXPORT_PROMPTS)} runs give llama.cpp's {TOOL} our full greedy "
          f"text at --temp 0; {refused_text}; {TOOL} {'ran every export' if ok else 'FAILED or refused (see above)'}",
          flush=True)
    return ok


def _list(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def as_on_avx2() -> None:
    """Restart this script with torch on its AVX2 kernels and oneDNN held to AVX2, unless it already is."""
    if torch.backends.cpu.get_cpu_capability() == "AVX2" and all(os.environ.get(k) == v for k, v in AVX2_ENV.items()):
        return
    if all(os.environ.get(k) == v for k, v in AVX2_ENV.items()):  # restarted, and still not on AVX2
        raise SystemExit(f"--isa avx2: torch runs {torch.backends.cpu.get_cpu_capability()} kernels even with "
                         f"ATEN_CPU_CAPABILITY=avx2 (does this CPU have AVX2?)")
    sys.stdout.flush()
    argv = [sys.executable, *sys.orig_argv[1:]]  # the same interpreter options and arguments
    os.execve(sys.executable, argv, {**os.environ, **AVX2_ENV})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="SmolLM2 only, 32 tokens, 2 runs each")
    ap.add_argument("--isa", choices=sorted(ISA_FLAGS), default="native",
                    help="native: both sides on every instruction this CPU has; avx2: both as on an AVX2-only CPU "
                         "(torch's AVX2 kernels, oneDNN up to AVX2, llama.cpp built for AVX2 without AVX-512)")
    ap.add_argument("--dtype", default="float32,auto",
                    help="our weights, one or more of auto, float32, bfloat16, int4 (comma-separated; each measured in "
                         "turn with llama.cpp; the verify costs use the last)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--verify-repeats", type=int, default=15)
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--export-check", action="store_true",
                    help=f"instead of timing: build llama.cpp's {TOOL} and run the exported llama-cli flags of a few "
                         "SmolLM2 runs with it at --temp 0, comparing its text with ours")
    args = ap.parse_args()
    if args.isa == "avx2":
        as_on_avx2()  # before anything is loaded or built
    if args.quick:
        args.models, args.tokens, args.repeats, args.verify_repeats = "smollm2-135m", 32, 2, 7
    torch.set_num_threads(args.threads)
    if args.export_check:
        sys.exit(0 if export_check(models.ModelStore("cpu"), "smollm2-135m", args) else 1)
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    print(f"torch {torch.__version__} on its {torch.backends.cpu.get_cpu_capability()} kernels"
          f"{f' (oneDNN up to {onednn})' if onednn else ''}, {args.threads} threads, {args.tokens} new tokens, "
          f"median of {args.repeats}, dtype {args.dtype}; {os.cpu_count()} CPUs, {load()}", flush=True)
    print(f"llama.cpp: the sources llama-cpp-python {LLAMA_CPP_PYTHON} vendors, built ({args.isa}) with "
          f"{' '.join(['-DCMAKE_BUILD_TYPE=Release', *ISA_FLAGS[args.isa]])}", flush=True)
    worker = llama_cpp_worker(args.isa)  # built (on first use) and, for avx2, checked before any model loads
    store = models.ModelStore("cpu")
    for key in args.models.split(","):
        side_by_side(store, key, args, worker)
        verify_costs(store, key, args)
    print(load())


if __name__ == "__main__":
    main()
