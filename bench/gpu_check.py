"""The GPU check in one command: the CUDA tests and a short speed bench, written to one report.

    make gpu-check        # installs .venv, then: .venv/bin/python bench/gpu_check.py
    .venv/bin/python bench/gpu_check.py [--report artifacts/gpu-check.md] [--tokens 64] [--device cuda]
                                        [--skip-tests] [--skip-bench]

On a machine with CUDA it runs the tests marked ``cuda`` (tests/engine/test_cuda.py: every strategy on the GPU
against the CPU within the stated tolerance, greedy speculative and EAGLE equal to greedy, the grammar
stage, where the models are placed, the ZeroGPU path through `spaces`), then times greedy decoding of
SmolLM2 and Gemma 3 on the GPU in float32 and bfloat16 beside the CPU (float32 and auto), and writes
everything to one Markdown report. About 5 minutes on one GPU; the first run also converts the GGUF
files (a minute).

Where torch sees no CUDA device the report says so, the tests are listed as skipped with their reason,
and the exit status is 3. ``--device cpu`` rehearses the whole check on the CPU: it checks the check (its
tests and its report), not CUDA.

Exit status: 0 every test passed and the bench ran; 1 a test failed or the bench raised; 2 bad
arguments; 3 no CUDA device.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

NO_CUDA = 3
PROMPT = "Write a long, detailed story about a dragon who learns to bake bread."
MODELS = ("smollm2-135m", "gemma3-270m")
DEVICE_WEIGHTS = ("float32", "bfloat16")  # on the GPU
CPU_WEIGHTS = ("float32", "auto")  # beside it, on this machine's CPU


@dataclass
class Outcome:
    test: str  # the test's name, as pytest writes it
    outcome: str  # passed, failed, error or skipped
    message: str = ""  # why it failed or skipped


@dataclass
class TestRun:
    outcomes: list[Outcome] = field(default_factory=list)
    returncode: int = 0
    seconds: float = 0.0
    summary: str = ""  # pytest's closing line

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.outcome in ("failed", "error")]


@dataclass
class Row:
    model: str
    device: str
    weights: str  # what was asked (auto resolves to what the trace says)
    ran: str = ""  # the weights the run used
    tokens_per_second: float = 0.0
    error: str = ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", type=Path, default=ROOT / "artifacts" / "gpu-check.md",
                    help="the Markdown report to write (default: artifacts/gpu-check.md)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per bench run, 1 to 512 (default 64)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="the device under test; cpu rehearses the check on a machine without a GPU")
    ap.add_argument("--skip-tests", action="store_true", help="the bench only")
    ap.add_argument("--skip-bench", action="store_true", help="the tests only")
    args = ap.parse_args(argv)
    if not 1 <= args.tokens <= 512:
        ap.error(f"--tokens must be in [1, 512], got {args.tokens}")
    if args.skip_tests and args.skip_bench:
        ap.error("--skip-tests and --skip-bench together leave nothing to check")
    return args


def read_junit(path: Path) -> list[Outcome]:
    """Each test case of a pytest JUnit XML file, with its outcome and message."""
    outcomes = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name, outcome, message = case.get("name", ""), "passed", ""
        for tag, said in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            node = case.find(tag)
            if node is not None:
                text = (node.get("message") or node.text or "").strip()
                outcome, message = said, text.splitlines()[0][:300] if text else ""
                break
        outcomes.append(Outcome(name, outcome, message))
    return outcomes


def run_tests(device: str) -> TestRun:
    """tests/engine/test_cuda.py in its own pytest process, on ``device``."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        junit = Path(tmp) / "junit.xml"
        env = {**os.environ, "PLAYGROUND_CUDA_TEST_DEVICE": device}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "cuda",
                               f"--junitxml={junit}", "tests/engine/test_cuda.py"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        seconds = time.perf_counter() - start
        outcomes = read_junit(junit) if junit.exists() else []
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else done.stderr.strip()[-300:]
    return TestRun(outcomes, done.returncode, seconds, summary)


def bench(device: str, tokens: int) -> list[Row]:
    """Greedy tokens/s of each model and weights on ``device`` and on the CPU, each after one warm-up run."""
    from playground.engine import Request, run
    from playground.models import ModelStore

    rows = []
    stores = {"cpu": ModelStore("cpu")}
    if device != "cpu":
        stores[device] = ModelStore(device)
    pairs = dict.fromkeys([*((device, w) for w in DEVICE_WEIGHTS), *(("cpu", w) for w in CPU_WEIGHTS)])
    for model in MODELS:
        for where, weights in pairs:
            row = Row(model, where, weights)
            try:
                run(stores[where], Request(model, "greedy", PROMPT, max_new_tokens=4, dtype=weights))  # warm-up
                trace = run(stores[where], Request(model, "greedy", PROMPT, max_new_tokens=tokens, dtype=weights))
                record = trace.to_dict()
                row.ran, row.tokens_per_second = record["dtype"], record["timing"]["tokens_per_second"]
            except Exception as err:  # a row that raised is reported, the others still run
                row.error = f"{type(err).__name__}: {err}"
                traceback.print_exc()
            rows.append(row)
    return rows


def machine(device: str) -> list[str]:
    facts = [f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}"]
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.append(f"CUDA {torch.version.cuda}: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
                     f"compute capability {props.major}.{props.minor}")
    else:
        facts.append("no CUDA device: torch.cuda.is_available() is False")
    if device == "cpu":
        facts.append("rehearsal: the device under test is the CPU (--device cpu); nothing here is about CUDA")
    facts.append(f"CPU kernels: {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores")
    return facts


def render(facts: list[str], tests: TestRun | None, rows: list[Row] | None, tokens: int, verdict: str) -> str:
    """The report, in Markdown."""
    out = ["# GPU check", "", f"**{verdict}**", "", "## Machine", "", *(f"- {f}" for f in facts), ""]
    if tests is not None:
        counts = {k: sum(o.outcome == k for o in tests.outcomes) for k in ("passed", "failed", "error", "skipped")}
        out += ["## Tests marked cuda (tests/engine/test_cuda.py)", "",
                f"{counts['passed']} passed, {counts['failed'] + counts['error']} failed, {counts['skipped']} skipped "
                f"in {tests.seconds:.0f} s (pytest: {tests.summary})", "", "| test | outcome | message |",
                "|---|---|---|"]
        out += [f"| {o.test} | {o.outcome} | {o.message.replace('|', '/')} |" for o in tests.outcomes]
        out.append("")
    if rows is not None:
        out += [f"## Greedy tokens/s, {tokens} new tokens after a warm-up run", "",
                "| model | device | weights asked | weights run | tokens/s |", "|---|---|---|---|---|"]
        for r in rows:
            speed = f"{r.tokens_per_second:.1f}" if not r.error else f"error: {r.error.replace('|', '/')[:200]}"
            out.append(f"| {r.model} | {r.device} | {r.weights} | {r.ran or '-'} | {speed} |")
        out.append("")
    return "\n".join(out)


def verdict(device: str, tests: TestRun | None, rows: list[Row] | None) -> tuple[int, str]:
    if device == "cuda" and not torch.cuda.is_available():
        return NO_CUDA, "no CUDA device here: the cuda tests skip and the GPU was not timed"
    failed = tests.failed if tests is not None else []
    broken = [r for r in rows or [] if r.error]
    if failed or broken or (tests is not None and tests.returncode not in (0, 5)):
        names = ", ".join([o.test for o in failed] + [f"{r.model} {r.device} {r.weights}" for r in broken])
        return 1, f"FAILED: {names or tests.summary}"
    return 0, "passed"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    has_device = args.device == "cpu" or torch.cuda.is_available()
    tests = None if args.skip_tests else run_tests(args.device)
    rows = None if args.skip_bench or not has_device else bench(args.device, args.tokens)
    code, line = verdict(args.device, tests, rows)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(render(machine(args.device), tests, rows, args.tokens, line), encoding="utf-8")
    print(f"gpu check: {line}; report: {args.report}")
    return code


if __name__ == "__main__":
    sys.exit(main())
