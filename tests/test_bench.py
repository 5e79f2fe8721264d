"""The benchmarks run: each script parses and its --quick mode finishes on toy and prints its ratios."""
from __future__ import annotations

import py_compile
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
RATIO_LINES = {  # what each --quick run must print: its ratios against a reference in the same process
    "bench_engine.py": [r"toy +greedy .* ratio traced/generate \d+\.\d+", r"toy +sampling .* ratio traced/generate \d+\.\d+"],
    "bench_beam.py": [r"ours / transformers = \d+\.\d+x", r"naive / ours += \d+\.\d+x"],
    "bench_eagle.py": [r"toy: T=0 eagle tree 4x2 .* tau \d+\.\d+ .* ratio, .*: \d+\.\d+x"],
    "bench_speculative.py": [r"toy: plain / speculative wall-clock ratio, .*: \d+\.\d+x"],
    "bench_sample_many.py": [r"ratio sample many / one by one \d+\.\d+",
                             r"replayed seeds that wrote another text than their batched row: \d+ of 3"],
    "bench_grammar.py": [r"greedy +regex: .* grammar / plain per-step ratio \d+\.\d+",
                         r"sampling +regex: .* grammar / plain per-step ratio \d+\.\d+",
                         r"the tokenizer's set-up \d+\.\d+ s"],
    "bench_load.py": [r"errors: 0\b", r"seeded answers equal to their serial reference: (\d+)/\1\b"],
}
QUICK = {  # the short run of each; the load test's own --quick is a minute of load and a fault drill
    "bench_sample_many.py": ["--quick", "--skip-generate"],
    "bench_load.py": ["--seconds", "20", "--clients", "4", "--skip-faults"],
}


# Benches whose short run cannot be part of `make test`, and why; they are still compiled.
COMPILE_ONLY = {
    "bench_llamacpp.py": "it needs llama.cpp (its first run fetches the sources and builds the library into "
                         ".bench-venv: about 4 minutes on two cores; `make bench` runs it), and llama.cpp runs "
                         "the real GGUF models, not toy",
}


def test_every_bench_script_is_listed():
    assert sorted(p.name for p in BENCH.glob("bench_*.py")) == sorted([*RATIO_LINES, *COMPILE_ONLY])


@pytest.mark.parametrize("script", sorted([*RATIO_LINES, *COMPILE_ONLY]))
def test_bench_compiles(script, tmp_path):
    py_compile.compile(str(BENCH / script), cfile=str(tmp_path / "out.pyc"), doraise=True)


@pytest.mark.parametrize("script", sorted(RATIO_LINES))
def test_bench_quick_runs_on_toy(script):
    done = subprocess.run([sys.executable, str(BENCH / script), *QUICK.get(script, ["--quick"])],
                          capture_output=True, text=True, timeout=600, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    for pattern in RATIO_LINES[script]:
        assert re.search(pattern, done.stdout), (pattern, done.stdout[-2000:])
