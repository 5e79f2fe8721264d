"""The "what if" commands: run --force, sample, score; JSON out, bad input as one line with status 2."""
import json

import pytest

from playground.cli import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_run_force_writes_the_30_percent_path(capsys):
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--strategy", "greedy", "--force", "0:the"]) == 0
    assert capsys.readouterr().out.strip().startswith("the hill rose high")
    trace = _json(capsys, ["run", "--model", "toy", "--prompt", "1 2", "--force", "0:9", "--force", "1:10",
                           "--json", "--max-new-tokens", "3"])
    assert [s.get("forced", False) for s in trace["steps"]] == [True, True, False]
    assert trace["steps"][0]["strategy_choice_text"] == " a"


def test_sample_json_has_outcomes_with_exact_probabilities(capsys):
    result = _json(capsys, ["sample", "--model", "toy", "--strategy", "sampling", "--prompt", "1 2", "--n", "400",
                            "--tokens", "2", "--json"])
    top = {o["text"]: o for o in result["outcomes"]}
    assert top["a time"]["count"] / 400 == pytest.approx(0.70, abs=0.06)
    assert top["a time"]["probability"] == pytest.approx(0.70, abs=0.02)
    assert top["the hill"]["probability"] == pytest.approx(0.30, abs=0.02)
    assert sum(o["count"] for o in result["outcomes"]) == 400 and result["chi_square"]["p_value"] > 0.01
    assert main(["sample", "--model", "toy", "--prompt", "1 2", "--n", "50", "--tokens", "2",
                 "--temperature", "1.5"]) == 0
    assert "chi-square" in capsys.readouterr().out


def test_score_json_has_tokens_and_perplexity(capsys):
    result = _json(capsys, ["score", "--model", "toy", "--text", "1 2 3", "--json"])
    assert [t["text"] for t in result["tokens"]] == [" once", " upon", " a"]
    assert result["tokens"][2]["prob"] == pytest.approx(0.70, abs=0.03) and result["tokens"][2]["rank"] == 1
    assert result["perplexity"] > 1
    assert main(["score", "--model", "toy", "--text", "once upon the", "--prompt", "1"]) == 0
    assert "perplexity" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["sample", "--prompt", "1 2", "--n", "0"], "n must be an integer in [1, 1000], got 0"),
    (["sample", "--prompt", "1 2", "--n", "5000"], "n must be an integer in [1, 1000], got 5000"),
    (["sample", "--prompt", "1 2", "--tokens", "65"], "tokens must be an integer in [1, 64] for sample many, got 65"),
    (["sample", "--prompt", "1 2", "--strategy", "beam"], "beam search is deterministic"),
    (["sample", "--prompt", "1 2", "--top-p", "2"], "top_p must be in (0, 1], got 2"),
    (["run", "--prompt", "1 2", "--force", "40:the"], "forced steps must be integers in [0, 31], got '40'"),
    (["run", "--prompt", "1 2", "--force", "0:dragon"], "must be in the vocabulary of toy, got 'dragon'"),
    (["run", "--prompt", "1 2", "--force", "the"], "--force must be STEP:TOKEN"),
    (["score", "--text", " "], "text must not be empty"),
])
def test_bad_input_exits_2_with_the_range(capsys, argv, message):
    assert main(argv[:1] + ["--model", "toy"] + argv[1:]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and message in err
