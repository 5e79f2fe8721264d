"""The entropy map (playground.charts.entropy_map): each step's recorded entropy and varentropy drawn as
they are, the selected step ringed; and the varentropy the recorder writes is the variance of the surprisal."""
from __future__ import annotations

import math

import pytest
import torch

from playground.charts import entropy_map
from playground.charts.views import strategy_views
from playground.engine import Request, run


def toy_trace(store, params, n=8, prompt="1 2", seed=0):
    return run(store, Request("toy", "sampling", prompt, params, seed=seed, max_new_tokens=n)).to_dict()


def test_entropy_map_draws_the_recorded_numbers(store):
    trace = toy_trace(store, {"temperature": 1.5, "top_k": 5}, n=10)
    fig = entropy_map.entropy_map_figure(trace, selected=3)
    dots, ring = fig.data
    steps = trace["steps"]
    assert list(dots.x) == [s["raw_entropy"] for s in steps]
    assert list(dots.y) == [s["raw_varentropy"] for s in steps]
    assert [c[2] for c in dots.customdata] == [s["kept_count"] for s in steps]
    assert all(s["kept_count"] <= 5 for s in steps)
    assert (ring.x[0], ring.y[0]) == (steps[3]["raw_entropy"], steps[3]["raw_varentropy"])
    assert "Entropy map" in {v.title for v in strategy_views(trace, 3)}


def test_varentropy_is_the_variance_of_the_surprisal():
    from strategies.recording import entropy_of, varentropy_of
    p = torch.tensor([[0.5, 0.25, 0.25, 0.0]])
    logp = p.log()
    h = entropy_of(logp, p)
    # surprisals ln 2, ln 4, ln 4 around H = 1.5 ln 2: variance 0.25 (ln 2)^2
    assert float(varentropy_of(logp, p, h)) == pytest.approx(0.25 * math.log(2) ** 2, rel=1e-6)
    assert float(varentropy_of(torch.zeros(1, 4).log_softmax(-1), torch.full((1, 4), 0.25),
                               torch.tensor([math.log(4)]))) == pytest.approx(0.0, abs=1e-7)
