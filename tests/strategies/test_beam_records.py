"""What the beam family records for the generic charts and what its views label: the best path's
steps carry the decoder's own kept flags and probabilities, the tree marks the selected step, and a
stochastic beam at T != 1 names the model's and the tempered log-probabilities apart."""
from __future__ import annotations

import json
import math

import pytest
import torch
from beam_fakes import final

from playground.charts.beam import finished_table, tree_figure, views
from playground.charts.views import strategy_views
from strategies.beam.beam import BeamParams, beam
from strategies.beam.sample_beam import SampleBeamParams, sample_beam
from strategies.beam.stochastic_beam import StochasticBeamParams, stochastic_beam

RUNS = [
    (beam, BeamParams(num_beams=4, relative_threshold=0.05, max_candidates_per_node=2), "beam"),
    (beam, BeamParams(num_beams=3, finishing="keep_slot"), "beam"),
    (sample_beam, SampleBeamParams(num_beams=3, prefix_tokens=2, num_prefixes=2, temperature=2.0), "beam"),
    (stochastic_beam, StochasticBeamParams(num_beams=4), "gumbel-top-k"),
    (stochastic_beam, StochasticBeamParams(num_beams=4, temperature=2.0), "gumbel-top-k"),
]


def entered(node: dict) -> bool:
    """Won a beam slot at its step: ran on, finished, or finished and was pushed out later."""
    return node["status"] in ("kept", "finished") or "pushed out" in node["reason"] or "displaced" in node["reason"]


def model_logprobs(lm, ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T) after ``ids``, from one uncached forward pass."""
    with torch.no_grad():
        return (lm.model(torch.tensor([ids])).logits[0, -1].double() / temperature).log_softmax(-1)


@pytest.mark.parametrize("fn,params,selector", RUNS, ids=lambda x: getattr(x, "__name__", ""))
def test_best_path_steps_carry_the_decoders_kept_flags_and_probabilities(toy, fn, params, selector):
    trace = json.loads(final(fn, toy, params, [4, 4], 7, seed=3).to_json())
    nodes = trace["beam"]["nodes"]
    temperature = getattr(params, "temperature", 1.0) if fn is stochastic_beam else 1.0
    searched = [s for s in trace["steps"] if "beam_node" in s]
    assert searched
    for s in searched:
        node = nodes[s["beam_node"]]
        siblings = [n for n in nodes if n["parent"] == node["parent"] and n["step"] == node["step"]
                    and n["tree"] == node["tree"]]
        cands = {c["id"]: c for c in s["candidates"]}
        assert {c["id"] for c in s["candidates"] if c["kept"]} == {n["token_id"] for n in siblings if entered(n)}
        assert cands[s["chosen"]]["kept"]
        *dists, selection = s["stages"]
        assert selection["name"] == selector and selection["kept_count"] == sum(1 for n in siblings if entered(n))
        assert selection["kept"] == [c["kept"] for c in s["candidates"]]
        assert [d["name"] for d in dists] == (["raw", "temperature"] if temperature != 1.0 else ["raw"])
        assert all(d["kept_count"] == toy.vocab_size and all(d["kept"]) for d in dists)  # nothing truncated
        for c, p in zip(s["candidates"], selection["probs"]):
            assert p == (c["prob"] if c["kept"] else 0.0)
        # the probabilities are the model's, recomputed here without the decoder's cache
        prefix = [4, 4] + [nodes[i]["token_id"] for i in trace["beam"]["best"]][:node["step"]]
        raw, tempered = model_logprobs(toy, prefix), model_logprobs(toy, prefix, temperature)
        for c in s["candidates"]:
            assert c["raw_prob"] == pytest.approx(math.exp(raw[c["id"]]), rel=1e-4, abs=1e-7)
            assert c["prob"] == pytest.approx(math.exp(tempered[c["id"]]), rel=1e-4, abs=1e-7)
        assert [p for p in dists[0]["probs"]] == [c["raw_prob"] for c in s["candidates"]]


@pytest.mark.parametrize("fn,params", [(beam, BeamParams(num_beams=3)),
                                       (sample_beam, SampleBeamParams(num_beams=2, prefix_tokens=2,
                                                                      num_prefixes=2, temperature=2.0)),
                                       (stochastic_beam, StochasticBeamParams(num_beams=3))],
                         ids=lambda x: getattr(x, "__name__", ""))
def test_the_tree_marks_the_selected_step(toy, fn, params):
    trace = json.loads(final(fn, toy, params, [4, 4], 6, seed=2).to_json())
    best = trace["beam"]["best"]
    for step in range(len(trace["steps"])):
        # the tree's x is the step index: the winning path's node for this step sits in that column
        assert trace["beam"]["nodes"][best[step]]["step"] == step
        for figure in (views(trace, step=step)[0].figure, tree_figure(trace, step),
                       next(v.figure for v in strategy_views(trace, step) if v.title == "Beam tree")):
            bands = [sh for sh in figure.layout.shapes if sh.name == "selected_step"]
            assert len(bands) == 1 and (bands[0].x0, bands[0].x1) == (step - 0.5, step + 0.5)
    for figure in (views(trace)[0].figure, tree_figure(trace, len(trace["steps"])), tree_figure(trace, -1)):
        assert not [sh for sh in figure.layout.shapes if sh.name == "selected_step"]


def test_stochastic_beam_at_t2_names_the_model_and_the_tempered_log_probability(toy):
    temperature = 2.0
    trace = json.loads(final(stochastic_beam, toy, StochasticBeamParams(num_beams=3, temperature=temperature),
                             [4, 4], 5, seed=1).to_json())
    rows = trace["beam"]["finished"]
    for r in rows:
        ids = [4, 4] + r["token_ids"]
        model = sum(float(model_logprobs(toy, ids[:i])[ids[i]]) for i in range(2, len(ids)))
        tempered = sum(float(model_logprobs(toy, ids[:i], temperature)[ids[i]]) for i in range(2, len(ids)))
        assert r["score"] == pytest.approx(model, abs=1e-4)
        assert r["phi"] == pytest.approx(tempered, abs=1e-4)
        assert abs(model - tempered) > 1e-3  # the two differ, so a swap would show
    table = finished_table(trace)
    assert "<th>model log-prob (sum)</th>" in table and "<th>tempered log-prob sum phi (T=2)</th>" in table
    assert "<th>log-prob (sum)</th>" not in table
    node = trace["beam"]["nodes"][trace["beam"]["best"][-1]]
    hover = next(h for tr in tree_figure(trace).data if tr.hovertext for h, i in zip(tr.hovertext, tr.customdata)
                 if i == node["id"])
    assert "tempered log-prob (T=2)" in hover and "model log-prob" in hover

    at_one = json.loads(final(stochastic_beam, toy, StochasticBeamParams(num_beams=3), [4, 4], 5,
                              seed=1).to_json())
    table = finished_table(at_one)
    assert "<th>model log-prob (sum)</th>" in table and "tempered" not in table
    assert all(r["phi"] == pytest.approx(r["score"], abs=1e-5) for r in at_one["beam"]["finished"])
