"""Devices without float64 (Apple's MPS): the Gumbel selector runs with every float64 op refused.

``RefuseFloat64`` stands in for such a device on the CPU: any torch call that takes or makes a
float64 tensor raises, as MPS does. The gumbel strategy runs end to end under it once the device
says it has no float64, and the same run without that answer is refused (so the stand-in bites)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from torch.overrides import TorchFunctionMode

import strategies.sampling.chain as chain_module
from playground.engine import Request, run
from strategies.sampling.chain import GumbelMax, has_float64


class RefuseFloat64(TorchFunctionMode):
    """Raise on any torch function that receives or returns float64, or is asked for it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [*args, *kwargs.values()]
        if any(a is torch.float64 or (isinstance(a, torch.Tensor) and a.dtype == torch.float64) for a in inputs):
            raise TypeError(f"float64 refused by this device ({getattr(func, '__name__', func)})")
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.dtype == torch.float64:
            raise TypeError(f"float64 refused by this device ({getattr(func, '__name__', func)})")
        return out


@pytest.fixture
def no_float64_device(monkeypatch):
    monkeypatch.setattr(chain_module, "has_float64", lambda device: False)


def test_mps_is_the_device_without_float64():
    assert not has_float64(torch.device("mps")) and has_float64(torch.device("cpu"))


def test_the_stand_in_refuses_the_float64_draw(store):
    with RefuseFloat64(), pytest.raises(TypeError, match="float64 refused"):
        run(store, Request("toy", "gumbel", "1 2", seed=3, max_new_tokens=2))


def test_gumbel_strategy_runs_with_float64_refused(store, no_float64_device):
    with RefuseFloat64():
        trace = run(store, Request("toy", "gumbel", "1 2", {"temperature": 0.8, "top_k": 4}, seed=3,
                                   max_new_tokens=6)).to_dict()
    assert trace["tokens"]
    for step in trace["steps"]:
        best = max((c for c in step["candidates"] if c["kept"]), key=lambda c: c["perturbed_logit"])
        assert best["id"] == step["chosen"]  # still the argmax of logits + the traced noise


def test_float32_gumbel_draws_from_the_distribution(no_float64_device):
    """The float32 path is still Categorical(softmax(logits)): chi-square over 100,000 draws, with
    the power check that the same draws reject a uniform distribution."""
    logits = torch.randn(10, generator=torch.Generator().manual_seed(1234)) * 1.5
    draws = 100_000
    with RefuseFloat64():
        ids, noise = GumbelMax(torch.Generator().manual_seed(77)).select(logits.expand(draws, 10))
    assert noise.dtype == torch.float32
    counts = np.bincount(ids.numpy(), minlength=10)
    expected = logits.double().softmax(-1).numpy() * draws  # (outside the refusing device)
    assert chisquare(counts, expected).pvalue > 1e-3
    assert chisquare(counts, np.full(10, draws / 10)).pvalue < 1e-6
