"""The benchmarks run: each script parses and its --quick mode finishes on toy and prints its ratios."""
from __future__ import annotations

import py_compile
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"
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
    "bench_exact.py": [r"verify 5 tokens .* ratio exact / one call \d+\.\d+",
                       r"against the fixed 32-row form: plain decode ratio \d+\.\d+, prefill \d+\.\d+, verify \d+\.\d+",
                       r"one pass vs one token at a time: one call \S+, fixed 32 \S+, exact 0\n",
                       r"bfloat16 576x1536: \d+ rows? a call"],
    "bench_lens.py": [r"toy +float32 +3 rows, .* ratio lens / step \d+\.\d+; the page's button .* \d+\.\d+ steps"],
    "bench_step.py": [r"step profile toy float32: step \d+\.\d+ ms, rest/step \d+\.\d+"],
    "bench_load.py": [r"errors: 0\b", r"seeded answers equal to their serial reference: (\d+)/\1\b"],
    "bench_sweep.py": [r"toy: sweep of 4 temperatures x 16 samples .* ratio sweep / separate runs \d+\.\d+",
                       r"separate runs that wrote another text than their batched row: 0 of 64"],
    "bench_watch.py": [r"toy \S+ greedy *: .* watch / plain per-step ratio \d+\.\d+",
                       r"toy \S+ sampling *: .* watch / plain per-step ratio \d+\.\d+"],
}
# The short run of each. The load test's own --quick is a minute of load and a fault drill; here it is 10 s
# of load from four clients (two toy, SmolLM2 sampling, speculative: seeded answers checked against their
# serial references) and no warm-up rounds (only its memory readings need them).
QUICK = {
    "bench_sample_many.py": ["--quick", "--skip-generate"],
    "bench_load.py": ["--seconds", "10", "--clients", "4", "--skip-faults", "--warmups", "0"],
}


# Benches whose short run cannot be part of `make test`, and why; they are still compiled.
COMPILE_ONLY = {
    "bench_llamacpp.py": "it needs llama.cpp (its first run fetches the sources and builds the library into "
                         ".bench-venv: about 4 minutes on two cores; `make bench` runs it), and llama.cpp runs "
                         "the real GGUF models, not toy",
    "bench_answers.py": "it answers the 40 questions of assets/questions.json with SmolLM2 and Gemma 3, 16 samples "
                        "and 16 CoT-decoding branches each, for half an hour on two cores (its --quick runs the toy's task)",
    "bench_page.py": "it times the real app with SmolLM2 in Chromium for minutes, under a busy process on every "
                     "core (`make bench` runs it; tests/browser/test_browser_stop.py holds Stop's latency under load)",
}


def test_every_bench_script_is_listed():
    assert sorted(p.name for p in BENCH.glob("bench_*.py")) == sorted([*RATIO_LINES, *COMPILE_ONLY])


@pytest.mark.parametrize("script", sorted([*RATIO_LINES, *COMPILE_ONLY]))
def test_bench_compiles(script, tmp_path):
    py_compile.compile(str(BENCH / script), cfile=str(tmp_path / "out.pyc"), doraise=True)


# The short runs share one process (imports and the toy models once, not once a script); the load test
# starts its own server and runs alone. Each script's output and exit status is read from its section.
ALONE = {"bench_load.py"}
SHARED_RUNNER = """
import runpy, sys, traceback
for script, *args in JOBS:
    print("\\n@@@ start " + script, flush=True)
    sys.argv = [script, *args]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        code = 1
    print("\\n@@@ exit " + str(code), flush=True)
"""


def quick_argv(script: str) -> list[str]:
    return [str(BENCH / script), *QUICK.get(script, ["--quick"])]


@pytest.fixture(scope="module")
def shared_quick_runs() -> dict[str, tuple[int, str]]:
    """script -> (exit status, what it printed), for every script not run alone."""
    jobs = [quick_argv(s) for s in sorted(RATIO_LINES) if s not in ALONE]
    done = subprocess.run([sys.executable, "-c", f"JOBS = {jobs!r}\n{SHARED_RUNNER}"], capture_output=True,
                          text=True, timeout=900, cwd=BENCH.parent)
    runs = {}
    for section in done.stdout.split("\n@@@ start ")[1:]:
        path, _, rest = section.partition("\n")
        body, _, status = rest.rpartition("\n@@@ exit ")
        runs[Path(path).name] = (int(status.split()[0]) if status.strip() else 1, body)
    return runs | {"stderr": (done.returncode, done.stderr[-2000:])}


@pytest.mark.parametrize("script", sorted(RATIO_LINES))
def test_bench_quick_runs_on_toy(script, request):
    if script in ALONE:
        done = subprocess.run([sys.executable, *quick_argv(script)], capture_output=True, text=True, timeout=600,
                              cwd=BENCH.parent)
        status, out, err = done.returncode, done.stdout, done.stderr[-2000:]
    else:
        runs = request.getfixturevalue("shared_quick_runs")
        assert script in runs, f"{script} did not start in the shared run: {runs['stderr'][1]}"
        (status, out), err = runs[script], runs["stderr"][1]
    assert status == 0, (out[-2000:], err)
    for pattern in RATIO_LINES[script]:
        assert re.search(pattern, out), (pattern, out[-2000:])
