"""One seed, one run: the command line in two separate processes, every strategy and every choice a
run makes by itself (``eagle_tree`` auto, greedy and sampling; the weights' ``--dtype auto``; the
early-exit draft's layer -1), gives the same trace JSON once ``timing`` is removed. The two start
side by side on a machine that has measured nothing: what one measures (auto's pass costs) the other
reads, so both choose the same tree."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from strategies.registry import all_strategies

ROOT = Path(__file__).resolve().parents[2]
TOY = ["--model", "toy", "--prompt", "1 2 3 4 5 6 7 8 0 1 2", "--seed", "11", "--max-new-tokens", "10", "--json",
       "--dtype", "auto"]
EAGLE_AUTO = ["--strategy", "speculative", "--draft", "eagle", "--eagle-tree", "auto"]
CASES = [["--strategy", spec.name] for spec in all_strategies()] + [
    [*EAGLE_AUTO, "--temperature", "0"],
    [*EAGLE_AUTO, "--temperature", "1.2", "--top-p", "0.95"],
    ["--strategy", "speculative", "--draft", "eagle", "--eagle-tree", "static", "--temperature", "1"],
    ["--strategy", "speculative", "--draft", "early_exit", "--draft-layer", "-1", "--temperature", "1"],
    ["--strategy", "speculative", "--draft", "toy-small", "--adaptive-gamma", "true", "--temperature", "1"],
    ["--strategy", "speculative", "--draft", "prompt_lookup", "--verify", "topk"],
]

# One process runs every case through the command line's own entry point, printing each trace.
DRIVER = """
import contextlib, io, json, sys
from playground.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["run", *argv])
    out.append({"argv": argv, "code": code, "trace": json.loads(printed.getvalue()) if code == 0 else None})
print(json.dumps(out))
"""


def start(cache: Path) -> subprocess.Popen:
    argv = json.dumps([[*TOY, *case] for case in CASES])
    env = dict(os.environ, PYTHONPATH=str(ROOT), PLAYGROUND_CACHE=str(cache))
    return subprocess.Popen([sys.executable, "-c", DRIVER, argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where ``a`` and ``b`` first differ, as a path and the two values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {str(a)[:200]} != {str(b)[:200]}"


@pytest.mark.slow  # two fresh processes (about 30 to 50 s on two cores)
def test_two_processes_with_one_seed_give_the_same_trace_less_timing(tmp_path):
    processes = [start(tmp_path), start(tmp_path)]  # side by side, on a machine that has measured nothing
    runs, measured = [], 0
    for p in processes:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        runs.append(json.loads(out))
    for first, second in zip(*runs):
        assert first["code"] == second["code"] == 0, first["argv"]
        timings = [r["trace"].pop("timing") for r in (first, second)]
        assert first["trace"] == second["trace"], (first["argv"], first_difference(first["trace"], second["trace"]))
        if first["argv"][len(TOY):len(TOY) + len(EAGLE_AUTO)] == EAGLE_AUTO:
            assert all(t["speculative"]["auto_tree"]["tree_from"] == "measured pass costs" for t in timings)
            measured += sum(t["speculative"]["auto_tree"]["costs_measured_now"] for t in timings)
    assert measured == 1  # one process measured this machine's pass costs; the other read them


def test_the_cases_cover_every_strategy_and_every_choice_a_run_makes():
    assert {case[1] for case in CASES} == {spec.name for spec in all_strategies()}
    assert sum(case[:len(EAGLE_AUTO)] == EAGLE_AUTO for case in CASES) == 2
