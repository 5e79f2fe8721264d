"""``make gpu-check`` (bench/gpu_check.py) where there is no GPU: its arguments, its report, its exit
status. What it checks on a GPU is tests/engine/test_cuda.py."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/gpu_check.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("args, says", [
    (["--tokens", "0"], "--tokens must be in [1, 512], got 0"),
    (["--tokens", "513"], "--tokens must be in [1, 512], got 513"),
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--skip-tests", "--skip-bench"], "leave nothing to check"),
])
def test_bad_arguments_exit_2_with_the_allowed_values(args, says):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(args)
    assert exit_.value.code == 2
    done = check(*args)
    assert done.returncode == 2 and says in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: make gpu-check runs for real")
def test_without_cuda_the_report_lists_every_cuda_test_as_skipped_and_the_exit_is_3(tmp_path):
    report = tmp_path / "out" / "gpu.md"
    done = check("--report", str(report), "--skip-bench")
    assert done.returncode == gpu_check.NO_CUDA, done.stdout + done.stderr
    text = report.read_text()
    assert "no CUDA device here" in text and "torch.cuda.is_available() is False" in text
    listed = [line for line in text.splitlines() if line.startswith("| test_")]
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "tests/engine/test_cuda.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    names = [line.split("::", 1)[1] for line in collected.stdout.splitlines() if line.startswith("tests/engine/test_cuda.py::")]
    assert len(listed) == len(names) >= 10
    assert all("| skipped | no CUDA device here" in line for line in listed)
    assert "Greedy tokens/s" not in text  # --skip-bench


def test_the_report_names_failures_and_bench_rows():
    tests = gpu_check.TestRun([gpu_check.Outcome("test_a", "passed"),
                               gpu_check.Outcome("test_b[eagle-auto]", "failed", "assert [1, 2] == [1, 3]"),
                               gpu_check.Outcome("test_c", "skipped", "why | not")], 1, 12.3, "1 failed, 1 passed")
    rows = [gpu_check.Row("smollm2-135m", "cuda", "bfloat16", "bfloat16", 181.26),
            gpu_check.Row("gemma3-270m", "cpu", "auto", "", 0.0, "OverBudget: no room")]
    code, line = gpu_check.verdict("cpu", tests, rows)
    assert code == 1 and line == "FAILED: test_b[eagle-auto], gemma3-270m cpu auto"
    text = gpu_check.render(["fact one"], tests, rows, 64, line)
    assert "**FAILED: test_b[eagle-auto], gemma3-270m cpu auto**" in text and "- fact one" in text
    assert "1 passed, 1 failed, 1 skipped in 12 s" in text
    assert "| test_b[eagle-auto] | failed | assert [1, 2] == [1, 3] |" in text
    assert "| test_c | skipped | why / not |" in text  # a table cell keeps its column
    assert "| smollm2-135m | cuda | bfloat16 | bfloat16 | 181.3 |" in text
    assert "| gemma3-270m | cpu | auto | - | error: OverBudget: no room |" in text
    passed = gpu_check.TestRun([gpu_check.Outcome("test_a", "passed")], 0, 1.0, "1 passed")
    assert gpu_check.verdict("cpu", passed, rows[:1]) == (0, "passed")


def test_junit_outcomes_are_read_with_their_messages(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.test_cuda" name="test_ok" time="0.1"/>'
                     '<testcase classname="tests.test_cuda" name="test_bad[x]" time="0.2">'
                     '<failure message="assert 1 == 2&#10;more">trace</failure></testcase>'
                     '<testcase classname="tests.test_cuda" name="test_off" time="0">'
                     '<skipped type="pytest.skip" message="no CUDA device here">why</skipped></testcase>'
                     '</testsuite></testsuites>')
    assert gpu_check.read_junit(junit) == [gpu_check.Outcome("test_ok", "passed"),
                                           gpu_check.Outcome("test_bad[x]", "failed", "assert 1 == 2"),
                                           gpu_check.Outcome("test_off", "skipped", "no CUDA device here")]
