"""Constrained is not conditioned (Park et al. 2024, "Grammar-Aligned Decoding").

On toy after "1 2" the model writes " a ..." 70% of the time and " the ..." 30%, and after " a" it
almost never writes " hill". Under the choices " a hill rose high happily ever" and " the hill rose
high happily ever", masked sampling takes " a" or " the" as the model does at the first step (the
grammar allows both) and is then forced through the rest, so it writes the " a hill" text 70% of the
time; the model's own distribution restricted to the two texts gives it 0.015%.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from playground.charts.common import show_token
from playground.charts.whatif import sample_figure, sample_table_html
from playground.cli.whatif import sample_table
from playground.engine import Request
from playground.whatif.sample_many import sample_many

A_HILL, THE_HILL = " a hill rose high happily ever", " the hill rose high happily ever"
GRAMMAR = {"kind": "choices", "text": json.dumps([A_HILL, THE_HILL])}
N = 1000


@pytest.fixture(scope="module")
def result(store):
    return sample_many(store, Request(model="toy", strategy="sampling", prompt="1 2", params={}, seed=0,
                                      max_new_tokens=8, grammar=GRAMMAR), N)


def _valid(result):
    return {v["text"]: v for v in result["grammar"]["valid"]}


def test_masked_sampling_matches_the_product_of_renormalised_local_distributions_not_the_conditional(result):
    gap = result["grammar"]
    assert gap["enumerated"] and set(_valid(result)) == {A_HILL.strip(), THE_HILL.strip()}
    assert sum(v["count"] for v in gap["valid"]) == N and gap["invalid_frequency"] == 0.0
    assert gap["chi_square_masked"]["p_value"] > 0.01, gap["chi_square_masked"]
    assert gap["chi_square_conditional"]["p_value"] < 1e-6, gap["chi_square_conditional"]
    assert gap["tv_conditional"] > 0.5 and gap["tv_masked"] < 0.05
    assert result["chi_square"]["p_value"] > 0.01  # the run's own reference is the masked one
    a = _valid(result)[A_HILL.strip()]
    assert a["frequency"] == pytest.approx(0.70, abs=0.05)
    assert a["masked"] == pytest.approx(0.70, abs=1e-3) and a["conditional"] < 1e-3


def test_both_exact_distributions_equal_a_fresh_forward_pass(result, toy):
    """masked: the first step renormalised over {' a', ' the'}, the forced rest with probability 1;
    conditional: the model's probability of each whole text (then <eos>), renormalised."""
    vocab = {toy.piece(i): i for i in range(toy.vocab_size)}
    prompt = [1, 2]
    with torch.no_grad():
        first = toy.model(torch.tensor([prompt])).logits[0, -1].double().softmax(-1)
        whole = {}
        for text in (A_HILL, THE_HILL):
            ids = [vocab[" " + w] for w in text.split()] + [0]
            logp = toy.model(torch.tensor([prompt + ids])).logits[0].double().log_softmax(-1)
            whole[text.strip()] = math.exp(sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids)))
    z = float(first[vocab[" a"]] + first[vocab[" the"]])
    valid = _valid(result)
    assert valid[A_HILL.strip()]["masked"] == pytest.approx(float(first[vocab[" a"]]) / z, rel=1e-4)
    assert valid[THE_HILL.strip()]["masked"] == pytest.approx(float(first[vocab[" the"]]) / z, rel=1e-4)
    total = sum(whole.values())
    for text, p in whole.items():
        assert valid[text]["model"] == pytest.approx(p, rel=1e-3)
        assert valid[text]["conditional"] == pytest.approx(p / total, rel=1e-3)


def test_the_cli_table_shows_both_references_and_what_the_gap_means(result):
    table = sample_table(result)
    assert "P(y | y valid)" in table and "against conditional: chi-square" in table
    assert "blind to how likely the model finds the rest of the text" in table


def test_the_page_draws_the_recorded_conditional_beside_the_samples_and_says_what_the_gap_means(result):
    fig = sample_figure(result)
    bars = {t.name: t for t in fig.data}
    conditional = next(t for name, t in bars.items() if name.startswith("P(y | y valid)"))
    by_label = dict(zip(conditional.x, conditional.y))
    for v in result["grammar"]["valid"]:
        assert by_label["".join(show_token(p) for p in v["pieces"])] == v["conditional"]
    assert "constrained is not conditioned" in fig.layout.title.text
    html = sample_table_html(result)
    assert "Constrained is not conditioned." in html and "P(y | y valid)" in html
