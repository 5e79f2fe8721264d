"""The Gumbel-max selector's panel draws what the decoder recorded: per candidate the final logit, the
noise added to it and their sum (the perturbed logit), the recorded chosen token starred, and every
recorded noise of the run in the histogram against the Gumbel(0, 1) density. Read back from the
figure (tests/figure_reading.py) and compared with the trace, never with the chart's own helpers."""
from __future__ import annotations

import math

import pytest
import torch
from figure_reading import fig_dict, role_points, role_trace

from playground.charts.common import caption_of
from playground.charts.samplers import gumbel_figure
from playground.charts.views import strategy_views
from playground.engine import Request, run

SEEDS = (0, 1, 3)  # at seed 1 and 3 the first token is won by noise over the top logit (toy, top-k 3)


@pytest.fixture(scope="module")
def runs(store):
    return {seed: run(store, Request("toy", "gumbel", "1 2", {"top_k": 3, "temperature": 1.3}, seed=seed,
                                     max_new_tokens=6)).to_dict() for seed in SEEDS}


def _recorded(c: dict, field: str) -> bool:
    return isinstance(c.get(field), float) and math.isfinite(c[field])


def test_the_trace_records_the_final_logit_the_noise_and_their_sum(runs):
    """The record is what the selector compared: logit + noise = perturbed logit (float32), and the chosen
    token has the largest perturbed logit; a logit the chain cut is null, not -inf."""
    for d in runs.values():
        for s in d["steps"]:
            kept = [c for c in s["candidates"] if c["kept"]]
            for c in s["candidates"]:
                assert _recorded(c, "gumbel")
                if c["kept"]:
                    assert c["logit"] + c["gumbel"] == pytest.approx(c["perturbed_logit"], abs=1e-5)
                else:
                    assert c["logit"] is None and c["perturbed_logit"] is None
            assert max(kept, key=lambda c: c["perturbed_logit"])["id"] == s["chosen"]


def test_the_bars_are_the_recorded_logit_noise_and_perturbed_logit(runs):
    won_by_noise = 0
    for d in runs.values():
        for k, s in enumerate(d["steps"]):
            fd = fig_dict(gumbel_figure(d, k))
            drawn = {c["id"]: c for c in s["candidates"]
                     if all(_recorded(c, f) for f in ("logit", "gumbel", "perturbed_logit"))}
            logits, noise, perturbed = (role_points(fd, r) for r in ("logit", "noise", "perturbed"))
            assert set(logits) == set(noise) == set(perturbed) == set(drawn)
            for i, c in drawn.items():
                assert logits[i]["x"] == c["logit"] and logits[i]["base"] is None
                assert noise[i]["x"] == c["gumbel"] and noise[i]["base"] == c["logit"]
                assert perturbed[i]["x"] == c["perturbed_logit"]
                assert logits[i]["y"] == noise[i]["y"] == perturbed[i]["y"]  # one row per candidate
            [(star, at)] = role_points(fd, "chosen").items()
            assert star == s["chosen"] and at["x"] == drawn[star]["perturbed_logit"] and at["y"] == logits[star]["y"]
            top = max(drawn.values(), key=lambda c: c["logit"])
            title = fd["layout"]["title"]["text"]
            if drawn[s["chosen"]]["logit"] < top["logit"]:
                won_by_noise += 1
                assert "won by noise over" in title and title.endswith(top["text"].replace(" ", "·"))
            else:
                assert "won by noise" not in title and "the top logit" in title
    assert won_by_noise, "the runs hold a step won by noise"


def test_the_histogram_holds_every_recorded_noise_against_the_gumbel_density(runs):
    for d in runs.values():
        fd = fig_dict(gumbel_figure(d, 0))
        hist = role_trace(fd, "noise histogram")
        recorded = [c["gumbel"] for s in d["steps"] for c in s["candidates"]]
        assert sorted(hist["x"]) == sorted(recorded) and len(recorded) == 6 * len(d["steps"][0]["candidates"])
        assert hist["histnorm"] == "probability density"
        line = role_trace(fd, "density")
        x = torch.tensor(line["x"], dtype=torch.float64)
        want = torch.distributions.Gumbel(0.0, 1.0).log_prob(x).exp()
        assert torch.allclose(torch.tensor(line["y"], dtype=torch.float64), want, atol=1e-12)
        assert min(line["x"]) <= min(recorded) and max(line["x"]) >= max(recorded)


def test_a_candidate_without_a_recorded_noise_or_logit_is_not_drawn():
    cands = [{"id": 1, "text": " a", "kept": True, "logit": 3.0, "gumbel": 0.5, "perturbed_logit": 3.5},
             {"id": 2, "text": " b", "kept": True, "logit": 2.0, "gumbel": 2.0, "perturbed_logit": 4.0},
             {"id": 3, "text": " c", "kept": True, "logit": 1.0},
             {"id": 4, "text": " d", "kept": False, "logit": None, "gumbel": 4.0, "perturbed_logit": None}]
    trace = {"steps": [{"chosen": 2, "candidates": cands}], "tokens": [{"id": 2, "text": " b"}]}
    fig = gumbel_figure(trace, 0)
    fd = fig_dict(fig)
    assert set(role_points(fd, "logit")) == set(role_points(fd, "noise")) == {1, 2}
    assert list(role_points(fd, "chosen")) == [2]
    assert fd["layout"]["title"]["text"] == "Gumbel-max step 0: ·b won by noise over ·a"
    assert sorted(role_trace(fd, "noise histogram")["x"]) == [0.5, 2.0, 4.0]  # every recorded noise
    assert "2 candidates without a logit or noise" in caption_of(fig)
    assert "2.00 + 2.00 = 4.00" in caption_of(fig)


def test_the_view_is_listed_for_gumbel_runs_and_not_for_sampling(store, runs):
    assert "Gumbel-max" in [v.title for v in strategy_views(runs[0], step=2)]
    sampled = run(store, Request("toy", "sampling", "1 2", {"top_k": 3}, seed=0, max_new_tokens=4)).to_dict()
    assert "Gumbel-max" not in [v.title for v in strategy_views(sampled, step=2)]
    assert gumbel_figure(sampled, 0) is None


def test_the_view_follows_the_selected_step(runs):
    d = runs[1]
    last = len(d["steps"]) - 1
    assert gumbel_figure(d).layout.title.text.startswith(f"Gumbel-max step {last}:")
    [view] = [v for v in strategy_views(d, step=2) if v.title == "Gumbel-max"]
    assert view.figure.layout.title.text.startswith("Gumbel-max step 2:")
