"""Speculative decoding runs where float64 is refused, as on Apple's MPS (the second device in the lineup).

A dispatch mode makes every float64 tensor an error, the way MPS does; the verification functions,
the sampler and the whole strategy (every draft kind, both verifiers, a chain with every stage) run
under it on toy.
"""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from playground.engine import Request, run
from strategies.speculative.verify import rejection, sample, topk


class RefuseFloat64(TorchDispatchMode):
    """Any operation that takes, makes or is asked for a float64 tensor raises."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kwargs.get("dtype") == torch.float64:
            raise TypeError(f"{func} asked for float64")
        out = func(*args, **kwargs)
        for t in tree_leaves((args, kwargs, out)):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                raise TypeError(f"{func} touched a float64 tensor")
        return out


def test_the_mode_refuses_float64():
    with RefuseFloat64(), pytest.raises(TypeError, match="float64"):
        torch.rand(3, dtype=torch.float64)
    x = torch.ones(3)
    with RefuseFloat64(), pytest.raises(TypeError, match="float64"):
        x.double()


def test_verification_and_sampling_need_no_float64():
    g = torch.Generator().manual_seed(0)
    target = torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]])
    draft = torch.tensor([[[0.1, 0.6, 0.2, 0.1], [0.0, 0.0, 1.0, 0.0]]])
    ids = torch.tensor([[1, 2]])
    with RefuseFloat64():
        rejection(target, draft, ids, g)
        topk(target, draft, ids, g, 2, target)
        drawn = sample(torch.tensor([[0.0, 0.2, 0.8]]).expand(1000, 3), g)
    assert drawn.min() >= 1


@pytest.mark.parametrize("draft,verify", [("toy-small", "rejection"), ("early_exit", "topk"),
                                          ("prompt_lookup", "rejection")])
def test_the_strategy_needs_no_float64(store, draft, verify):
    params = {"draft": draft, "verify": verify, "temperature": 0.8, "top_k": 8, "top_p": 0.95, "min_p": 0.01,
              "repetition_penalty": 1.3, "gamma": 3, "measure_baseline": True}
    store.get("toy"), store.get("toy-small")  # loading the weights is not what is tested
    with RefuseFloat64():
        trace = run(store, Request("toy", "speculative", "1 2 3 4 5 6 7 8 0 1 2", params, seed=1, max_new_tokens=10))
    assert len(trace.tokens) > 0 and trace.rounds
