"""The CUDA path, checked against the CPU: what ``make gpu-check`` runs on a machine with a GPU.

Every test here is marked ``cuda`` and skips, with the reason, where torch sees no CUDA device (every
CPU-only machine, CI included). ``$PLAYGROUND_CUDA_TEST_DEVICE`` names the device under test
(default ``cuda``); ``bench/gpu_check.py --device cpu`` sets it to ``cpu`` to rehearse these tests on a
machine without a GPU, which checks the tests themselves, not CUDA.

The stated tolerances:
- toy in float32: a deterministic strategy writes the CPU's text token for token; a sampled one, read
  along the device run's own tokens on the CPU (forced), has every step's raw distribution within
  ``TOY_TOL`` of the CPU's (largest absolute difference of a candidate's probability);
- SmolLM2 in float32: greedy writes the CPU's text, and every step's raw distribution is within
  ``REAL_TOL``; in the device's half precision (bfloat16) greedy's first ``HALF_AGREE`` tokens match
  the device's own float32 run (bfloat16 rounding may flip a later near tie);
- speculative decoding (every draft) and EAGLE at temperature 0 write exactly greedy's text on the
  same device and weights: lossless.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from playground.engine import Request, run
from playground.models import ModelStore
from playground.models.dtypes import DEFAULT_DTYPE, dtype_name
from strategies.registry import all_strategies

DEVICE = os.environ.get("PLAYGROUND_CUDA_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                 reason="no CUDA device here (make gpu-check runs these on a GPU machine)")]

TOY_TOL = 1e-4
REAL_TOL = 2e-3
HALF_AGREE = 8
PROMPT = "Explain in one sentence why the sky is blue."
TOY = {  # strategy -> params, on toy with toy-small as draft and amateur
    "greedy": {}, "sampling": {"temperature": 1.0}, "gumbel": {"temperature": 1.0},
    "beam": {"num_beams": 3}, "stochastic_beam": {"num_beams": 3}, "sample_beam": {"num_beams": 3},
    "contrastive": {"amateur": "toy-small", "temperature": 0.0},
    "speculative": {"draft": "toy-small", "temperature": 0.0, "gamma": 3},
}
DETERMINISTIC = {"greedy", "beam", "contrastive", "speculative"}
FORCEABLE = {s.name for s in all_strategies() if s.forceable}  # the registry's word, not a list kept here


@pytest.fixture(scope="module")
def device_store() -> ModelStore:
    return ModelStore(DEVICE)


@pytest.fixture(scope="module")
def cpu_store() -> ModelStore:
    return ModelStore("cpu")


def raw_gap(a: dict, b: dict) -> float:
    """The largest difference of a candidate's raw probability between two traces of one path."""
    gap = 0.0
    for sa, sb in zip(a["steps"], b["steps"], strict=True):
        pa = {c["id"]: c["raw_prob"] for c in sa["candidates"]}
        pb = {c["id"]: c["raw_prob"] for c in sb["candidates"]}
        gap = max(gap, *(abs(pa[i] - pb[i]) for i in pa.keys() & pb.keys()))
    return gap


def test_models_and_their_caches_are_placed_on_the_device(device_store):
    for key in ("toy", "smollm2-135m"):
        lm = device_store.get(key)
        assert {p.device.type for p in lm.model.parameters()} == {torch.device(DEVICE).type}, key
    trace = run(device_store, Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=4, dtype="auto")).to_dict()
    assert len(trace["tokens"]) == 4
    if DEVICE == "cuda":  # auto on a GPU: the weights as loaded, in the GPU's half precision
        assert trace["dtype"] == dtype_name(device_store.get("smollm2-135m").dtype) != "float32"


@pytest.mark.parametrize("strategy", sorted(TOY))
def test_every_strategy_runs_on_the_device_as_on_the_cpu(device_store, cpu_store, strategy):
    req = Request("toy", strategy, "once upon", TOY[strategy], seed=3, max_new_tokens=8)
    on_device = run(device_store, req).to_dict()
    assert on_device["tokens"], on_device["finish_reason"]
    if strategy in DETERMINISTIC:
        assert on_device["text"] == run(cpu_store, req).to_dict()["text"]
    if strategy in FORCEABLE:  # the CPU read along the device's own tokens: the same distributions
        path = {i: t["id"] for i, t in enumerate(on_device["tokens"])}
        on_cpu = run(cpu_store, Request("toy", strategy, "once upon", TOY[strategy], seed=3,
                                        max_new_tokens=len(path), forced=path)).to_dict()
        assert [t["id"] for t in on_cpu["tokens"]] == list(path.values())
        assert raw_gap(on_device, on_cpu) <= TOY_TOL


def test_smollm2_in_float32_is_the_cpus_and_bfloat16_starts_the_same(device_store, cpu_store):
    req = Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=24, dtype="float32")
    on_device, on_cpu = run(device_store, req).to_dict(), run(cpu_store, req).to_dict()
    assert on_device["text"] == on_cpu["text"]
    assert raw_gap(on_device, on_cpu) <= REAL_TOL
    half = run(device_store, Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=24, dtype="auto")).to_dict()
    assert [t["id"] for t in half["tokens"][:HALF_AGREE]] == [t["id"] for t in on_device["tokens"][:HALF_AGREE]]


@pytest.mark.parametrize("dtype", ["float32", "auto"])
@pytest.mark.parametrize("draft", ["early_exit", "prompt_lookup", "eagle"])
def test_greedy_speculative_and_eagle_are_greedy_on_the_device(device_store, draft, dtype):
    greedy = run(device_store, Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=32, dtype=dtype))
    fast = run(device_store, Request("smollm2-135m", "speculative", PROMPT, {"draft": draft, "temperature": 0.0},
                                     max_new_tokens=32, dtype=dtype))
    assert [t.id for t in fast.tokens] == [t.id for t in greedy.tokens], (draft, dtype)


@pytest.mark.parametrize("model, prompt, choices", [
    ("toy", "once upon", [" a time", " the hill rose"]),
    ("smollm2-135m", "Is the sky blue? Answer yes, no or maybe.", ["yes", "no", "maybe"]),
])
def test_the_grammar_stage_holds_on_the_device(device_store, model, prompt, choices):
    for seed in range(3):
        trace = run(device_store, Request(model, "sampling", prompt, {"temperature": 1.5}, seed=seed, max_new_tokens=8,
                                          grammar={"kind": "choices", "text": json.dumps(choices)}))
        assert trace.to_dict()["text"].strip() in [c.strip() for c in choices], (model, seed)


def test_the_zero_gpu_path_decodes_on_the_device(device_store, monkeypatch):
    """The page's GPU decoder under `spaces.GPU` (ZeroGPU's decorator, recording its declared duration)
    with the weights on the device, as on a ZeroGPU Space."""
    from test_space import FakeSpaces

    from playground.serving.budget import Budget
    from playground.ui import handlers

    fake = FakeSpaces()
    monkeypatch.setattr(handlers, "spaces", fake)
    decoder = handlers.GpuDecoder(device_store, Budget(seconds=60))
    req = Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=12, dtype=DEFAULT_DTYPE)
    frames = list(handlers.generate(device_store, req, decoder=decoder))
    assert len(fake.durations) == 1 and "ZeroGPU: up to" in frames[-1].status
    assert device_store.get("smollm2-135m").device.type == torch.device(DEVICE).type
