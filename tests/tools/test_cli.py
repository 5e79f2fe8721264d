"""The CLI: text and JSON out, charts to files, and bad input as one line with exit status 2."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playground.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_run_prints_text(capsys):
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--strategy", "greedy"]) == 0
    assert capsys.readouterr().out.strip() == "a time there lived happily ever"


def test_run_json_and_html(tmp_path, capsys):
    html = tmp_path / "step.html"
    code = main(["run", "--model", "toy", "--strategy", "sampling", "--prompt", "once upon", "--top-p", "0.9",
                 "--min-p", "0.05", "--seed", "3", "--max-new-tokens", "4", "--json", "--html", str(html)])
    assert code == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["params"]["top_p"] == 0.9 and trace["params"]["min_p"] == 0.05 and trace["seed"] == 3
    assert len(trace["tokens"]) == 4
    assert "plotly" in html.read_text()


def test_list_shows_models_strategies_and_flags(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("toy", "smollm2-135m", "gemma3-270m", "greedy", "sampling", "gumbel", "--top-p", "--min-p",
                 "--repetition-penalty"):
        assert word in out


@pytest.mark.parametrize("args, message", [
    (["--strategy", "sampling", "--temperature", "-1"], "temperature must be in [0, 100], got -1"),
    (["--strategy", "sampling", "--temperature", "nan"], "temperature must be in [0, 100], got nan"),
    (["--strategy", "sampling", "--top-p", "1.5"], "top_p must be in (0, 1], got 1.5"),
    (["--strategy", "sampling", "--top-k", "-3"], "top_k must be in [0, 1000000], got -3"),
    (["--strategy", "sampling", "--min-p", "2"], "min_p must be in [0, 1], got 2"),
    (["--strategy", "sampling", "--repetition-penalty", "0"], "repetition_penalty must be in (0, 10], got 0"),
    (["--max-new-tokens", "0"], "max_new_tokens must be an integer in [1, 512], got 0"),
    (["--max-new-tokens", "100000"], "max_new_tokens must be an integer in [1, 512], got 100000"),
    (["--max-new-tokens", "63"], "max_new_tokens must be in [1, 62] for this prompt on toy"),
    (["--strategy", "nope"], "strategy must be one of"),
    (["--model", "org/no-such-model"],
     "the offline models are: toy, toy-small, toy-think, smollm2-135m, gemma3-270m"),
    (["--model", "no-such-model"], "model must be one of toy, toy-small, toy-think, smollm2-135m, gemma3-270m "
                                   "or a hub id namespace/name"),
    (["--model", "assets/toy"], "not the name of a file or directory on this server"),
    (["--time-budget", "-1"], "time budget must be a number of seconds > 0, got -1.0"),
])
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    base = ["run", "--model", "toy", "--prompt", "1 2"]
    assert main(base + args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and message in err


def test_empty_and_oversized_prompts(capsys):
    assert main(["run", "--model", "toy", "--prompt", "   "]) == 2
    assert "prompt must not be empty" in capsys.readouterr().err
    assert main(["run", "--model", "toy", "--prompt", " ".join(["1"] * 70)]) == 2
    assert "prompt is 70 tokens; toy accepts at most 63" in capsys.readouterr().err


def test_subprocess_bad_input_has_no_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "playground", "run", "--model", "toy", "--prompt", "1 2",
                          "--strategy", "sampling", "--top-p", "7"], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == "error: top_p must be in (0, 1], got 7"


def test_time_budget_stops_the_run_and_keeps_the_trace(capsys):
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--strategy", "sampling", "--max-new-tokens", "40",
                 "--time-budget", "0.000001", "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["finish_reason"] == "time budget" and 1 <= len(trace["tokens"]) == len(trace["steps"]) < 40
