"""The trace contract: every wall-clock figure lives under ``timing``, so two runs with one seed give
byte-identical JSON once ``timing`` is removed."""
from __future__ import annotations

import json

import pytest

from playground.engine import Request, run
from strategies.registry import all_strategies

CASES = [(spec.name, {}) for spec in all_strategies()] + [
    ("speculative", {"draft": "toy-small", "measure_baseline": True, "temperature": 1.5, "top_p": 0.95,
                     "repetition_penalty": 1.3}),
    ("speculative", {"draft": "prompt_lookup", "verify": "topk", "measure_baseline": True}),
]


@pytest.mark.parametrize("strategy,params", CASES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(CASES)])
def test_two_runs_with_one_seed_differ_only_in_timing(store, strategy, params):
    req = Request("toy", strategy, "1 2 3 4 5 6 7 8 0 1 2", params, seed=7, max_new_tokens=10)
    first, second = run(store, req), run(store, req)
    assert first.to_json(timing=False) == second.to_json(timing=False)
    assert "timing" not in json.loads(first.to_json(timing=False))
    assert first.to_dict()["timing"]["seconds"] > 0


def test_the_registry_is_covered():
    names = {s for s, _ in CASES}
    assert names == {spec.name for spec in all_strategies()} and "speculative" in names
