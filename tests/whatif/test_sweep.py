"""Sweep: the grid, the measures from the samples' records, the loop rate equal to the loop detector's, the
toy's measured distribution at each temperature against the exact one (chi-square), stop and progress, the CLI."""
import json

import pytest

from playground.cli import main
from playground.engine import Request
from playground.errors import InvalidRequest
from playground.whatif.grid import parse_values, sweep_values
from playground.whatif.questions import toy_task
from playground.whatif.sample_many import enumerate_outcomes, goodness_of_fit, reference_chain
from playground.whatif.sweep import sweep
from strategies.loops import find_loops
from strategies.registry import get_strategy

TEMPERATURES = [0.5, 1.0, 2.0]


def _req(tokens=8, **params):
    return Request(model="toy", strategy="sampling", prompt="1 2", max_new_tokens=tokens, params=params)


def test_grids_and_lists():
    assert parse_values("0.2,0.5,1") == [0.2, 0.5, 1.0]
    assert parse_values("lin:0.1:1.5:8") == pytest.approx([0.1 + 0.2 * i for i in range(8)])
    assert parse_values("log:0.01:1:3") == pytest.approx([0.01, 0.1, 1.0])
    assert sweep_values("sampling", "top_k", parse_values("lin:1:3:5"), {}) == [1, 2, 3]  # 1, 1.5, 2, 2.5, 3 rounded


@pytest.mark.parametrize("values, message", [
    ("lin:0:1:13", r"the grid's count must be an integer in \[1, 12\], got 13"),
    ("log:0:1:4", "a log grid's ends must be > 0"), ("lin:0:1", "a grid must be lin:LOW:HIGH:COUNT"),
    (",".join(["1"] * 13), r"a sweep takes 1 to 12 values, got 13"), ("0.2,x", "a sweep value must be a finite number"),
    ("", "values must be a list")])
def test_bad_values_are_refused(values, message):
    with pytest.raises(InvalidRequest, match=message):
        parse_values(values)


def test_bad_params_and_values_are_refused():
    with pytest.raises(InvalidRequest, match="param must be one of sampling's numeric parameters"):
        sweep_values("sampling", "order", [1.0], {})
    with pytest.raises(InvalidRequest, match="temperature"):
        sweep_values("sampling", "temperature", [-1.0], {})


@pytest.fixture(scope="module")
def toy_sweep(store):
    progress = []
    result = sweep(store, _req(), "temperature", TEMPERATURES, 1000, extract="choices:a|the", expected=["a"],
                   progress=lambda f, m: progress.append((f, m)))
    return result, progress


def test_sweep_matches_the_exact_distribution_at_each_temperature(store, toy, toy_sweep):
    result, progress = toy_sweep
    assert result["batched"] and not result["stopped"]
    assert [m for f, m in progress if m.startswith("temperature")] == [
        f"temperature = {t:g}: 1000 samples ({i + 1} of 3)" for i, t in enumerate(TEMPERATURES)]
    assert [f for f, m in progress] == sorted(f for f, m in progress) and progress[-1] == (1.0, "sweep done")
    json.dumps(result)
    tests = {}
    for point in result["points"]:
        params = get_strategy("sampling").params.from_dict({"temperature": point["value"]})
        counts = {tuple(o["ids"]): o["count"] for o in point["outcomes"]}
        exact = {k: 2.718281828459045 ** v for k, v in
                 enumerate_outcomes(toy, [1, 2], reference_chain("sampling", params), 8, 5 / 1000).items()}
        test, tv = goodness_of_fit(counts, exact, 1000)
        assert test["p_value"] > 1e-3 and tv < 0.05, (point["value"], test, tv)
        tests[point["value"]] = (counts, exact)
    # decisive: the counts at 0.5 are far from the exact distribution at 2
    wrong, _ = goodness_of_fit(tests[0.5][0], tests[2.0][1], 1000)
    assert wrong["p_value"] < 1e-9
    a_share = [p["accuracy"] for p in result["points"]]
    assert a_share[0] > a_share[1] > a_share[2]  # a cooler sampler picks the 70% path more often
    assert [p["modal_answer"] for p in result["points"]] == ["a", "a", "a"]
    # at temperature 1 the answers follow the task's true distribution (the toy's training rows: 70% 'a')
    assert a_share[1] == pytest.approx(toy_task()["distribution"]["a"], abs=0.05)


def test_measures_come_from_the_records(toy_sweep):
    point = toy_sweep[0]["points"][1]
    steps = [st for s in point["samples"] for st in s["steps"]]
    assert point["surprisal"] == pytest.approx(sum(-st["logprob"] for st in steps) / len(steps))
    assert point["entropy"] == pytest.approx(sum(st["entropy"] for st in steps) / len(steps))
    assert point["length"] == pytest.approx(sum(len(s["ids"]) for s in point["samples"]) / point["n"])
    unigrams = [t for s in point["samples"] for t in s["ids"]]
    assert point["distinct_1"] == pytest.approx(len(set(unigrams)) / len(unigrams))


def test_loop_rate_is_the_loop_detectors(store):
    result = sweep(store, _req(16, loop_repeats=2, loop_min_span=1), "temperature", [1.0, 4.0], 60)
    assert (result["loop_repeats"], result["loop_min_span"]) == (2, 1)
    rates = []
    for point in result["points"]:
        by_detector = sum(bool(find_loops(s["ids"], 2, 1)) for s in point["samples"]) / len(point["samples"])
        assert point["loop_rate"] == by_detector
        rates.append(point["loop_rate"])
    assert 0 < rates[1] < 1  # a hot toy repeats a word in some samples, not in all


def test_stop_keeps_what_is_done(store):
    asked = []
    result = sweep(store, _req(), "top_k", [1, 2, 3], 10, stop=lambda: asked.append(1) or len(asked) > 1)
    assert result["stopped"] and [p["value"] for p in result["points"]] == [1]
    assert result["values"] == [1, 2, 3]


def test_a_sweep_of_beam_width_runs_one_by_one(store):
    req = Request(model="toy", strategy="beam", prompt="1 2", max_new_tokens=6)
    result = sweep(store, req, "num_beams", [1, 2], 1, keep_samples=False)
    assert not result["batched"] and [p["n"] for p in result["points"]] == [1, 1]
    assert result["points"][0]["outcomes"][0]["text"].startswith("a time")


def test_cli_sweep_prints_the_table(capsys):
    assert main(["sweep", "--model", "toy", "--prompt", "1 2", "--param", "temperature", "--grid", "lin:0.5:1.5:3",
                 "--n", "8", "--tokens", "8", "--extract", "choices:a|the", "--expected", "a"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:3] == ["temperature", "loops", "dist1"] and len(out) == 5 and out[2].split()[0] == "0.5"
    assert main(["sweep", "--model", "toy", "--prompt", "1 2", "--param", "temperature", "--values", "1",
                 "--grid", "lin:0:1:2"]) == 2
    assert "exactly one of them" in capsys.readouterr().err
