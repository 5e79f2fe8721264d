"""The sampler stages at their edges, against what llama.cpp and transformers define: DRY's exponent
cap, its sequence breakers (a breaker token is never penalised; a breaker written across tokens ends
the repeat), XTC at threshold 0 and with ties, forced tokens with XTC and mirostat, typical-p cutting
the top token, and every parameter at the ends of its range on toy and SmolLM2."""
from __future__ import annotations

import dataclasses
import math
import sys

import pytest
import torch

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.tools.toy import WORDS
from strategies.params import field_kind
from strategies.sampling.repeats import DRY, dry_exponent_cap
from strategies.sampling.samplers import PRESETS as PRESET_NAMES
from strategies.sampling.samplers import SamplerParams
from strategies.sampling.truncations import XTC, TypicalP

A, THE = WORDS.index("a"), WORDS.index("the")


def pieces(*texts: str):
    return lambda i: texts[i]


def dry(breakers=("\n",), multiplier=1.0, base=2.0, allowed=2, texts=("a", "b", "\n", "c", "d", "##", "#", "###")):
    return DRY(multiplier, base, allowed, breakers, pieces(*texts))


def penalties(stage: DRY, context: list[int], vocab: int = 8) -> list[float]:
    out, decision = stage.decide(torch.zeros(1, vocab), torch.tensor([context]))
    return decision["penalty"][0].tolist()


# --- 1. DRY's exponent is capped (llama.cpp clamps it at log(FLT_MAX) / log(base)) ------------------

@pytest.mark.parametrize("base, repeats", [(1.75, 1300), (4.0, 520), (100.0, 160)])
def test_dry_never_overflows_however_long_the_repeat(base, repeats):
    stage = dry(breakers=("\n",), multiplier=0.8, base=base, allowed=1)
    logits = torch.zeros(1, 8)
    out, decision = stage.decide(logits, torch.tensor([[0] * repeats]))
    cap = dry_exponent_cap(base)
    assert decision["penalty"][0, 0].item() == pytest.approx(min(0.8 * base ** cap, torch.finfo().max), rel=1e-6)
    assert torch.isfinite(out).all() and out[0, 0] < -1e30


def test_dry_cap_is_llama_cpps_clamp():
    assert dry_exponent_cap(1.75) == int(88.7228391 / math.log(1.75)) == 158
    assert dry_exponent_cap(100.0) == 19 and dry_exponent_cap(1.0) is None


def test_dry_at_base_100_on_smollm_runs(store):
    trace = run(store, Request("smollm2-135m", "sampling", " a" * 160, {"dry_multiplier": 0.8, "dry_base": 100,
                                                                       "dry_allowed_length": 1},
                               chat=False, max_new_tokens=2))
    assert len(trace.tokens) >= 1
    d = next(st for st in trace.steps[0].stages if st.name == "dry").decision
    assert d["match_length"] >= 150


# --- 2. XTC at threshold 0 counts only live tokens --------------------------------------------------

def test_xtc_at_threshold_0_keeps_one_live_token_never_a_cut_one():
    logits = torch.tensor([[2.0, 1.0, 0.5, -math.inf, -math.inf]])
    out, d = XTC(1.0, 0.0, torch.Generator().manual_seed(0)).decide(logits, torch.zeros(1, 1, dtype=torch.long))
    assert torch.isfinite(out[0]).tolist() == [False, False, True, False, False]
    assert d["acted"].item() and d["removed"].item() == 2


def test_xtc_at_threshold_0_after_top_k_runs_on_toy(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"top_k": 3, "xtc_probability": 1, "xtc_threshold": 0},
                               max_new_tokens=6))
    for step in trace.steps:
        xtc = next(st for st in step.stages if st.name == "xtc")
        assert xtc.kept_count == 1 and math.isfinite(trace.tokens[0].logprob)


# --- 3. DRY never penalises a token that is itself a breaker ----------------------------------------

def test_dry_never_penalises_a_breaker_token():
    # a b \n c a b: "\n" followed the earlier "a b"; it ends a repeat, so it is not penalised
    assert penalties(dry(breakers=("\n",)), [0, 1, 2, 3, 0, 1])[2] == 0.0
    # a token that merely holds a breaker in its text is a breaker too
    stage = dry(breakers=("\n",), texts=("a", "b", "x\ny", "c"))
    assert penalties(stage, [0, 1, 2, 3, 0, 1], vocab=4)[2] == 0.0
    assert penalties(dry(breakers=(":",)), [0, 1, 2, 3, 0, 1])[2] == 1.0  # "\n" is not a breaker here


# --- 4. XTC with ties keeps exactly one token -------------------------------------------------------

def test_xtc_with_ties_keeps_exactly_one_token():
    probs = torch.tensor([[0.4, 0.3, 0.3]])
    out, d = XTC(1.0, 0.25, torch.Generator().manual_seed(0)).decide(probs.log(), torch.zeros(1, 1, dtype=torch.long))
    assert torch.isfinite(out[0]).tolist() == [False, True, False]  # the lowest id of the tied least probable
    assert d["removed"].item() == 2


def test_xtc_with_bfloat16_ties_at_the_top_removes_one():
    logits = torch.tensor([[3.0, 3.0, 1.0, 0.0]], dtype=torch.bfloat16)
    out, d = XTC(1.0, 0.1, torch.Generator().manual_seed(0)).decide(logits, torch.zeros(1, 1, dtype=torch.long))
    assert d["acted"].item() and d["removed"].item() == 1
    assert torch.isfinite(out[0]).tolist() == [True, False, True, True]  # of the tied two, the lowest id stays


# --- 5. DRY with breakers of several tokens (llama.cpp's restart sequences) -------------------------

def test_dry_breaker_written_across_tokens_ends_the_repeat():
    # a b ## # c d a b ## # c d, breaker "###": the repeat that can grow is "c d", so `a` gets 1 x 2^0
    context = [0, 1, 5, 6, 3, 4, 0, 1, 5, 6, 3, 4]
    assert penalties(dry(breakers=("###",)), context)[0] == 1.0
    assert penalties(dry(breakers=("\n",)), context)[0] == 16.0  # without the breaker: the whole 6 repeat
    # the order of the pieces matters: "# ##" is a breaker as well, "## c" is not
    assert penalties(dry(breakers=("###",)), [0, 1, 6, 5, 3, 4, 0, 1, 6, 5, 3, 4])[0] == 1.0
    # a single token holding the breaker
    assert penalties(dry(breakers=("###",)), [0, 1, 7, 3, 4, 0, 1, 7, 3, 4])[0] == 1.0


def test_dry_breaker_only_partly_written_does_not_break():
    # "##" at the very end: the breaker "###" is not there (yet)
    context = [0, 1, 3, 0, 1, 3, 5]
    stage = dry(breakers=("###",), allowed=1)
    assert stage._tail(context) == len(context)


# --- 6. and 7. forcing with XTC and with mirostat ---------------------------------------------------

def _run(store, prompt="1 2", forced=None, seed=0, n=8, strategy="sampling", **params):
    return run(store, Request(model="toy", strategy=strategy, prompt=prompt, params=params, seed=seed,
                              max_new_tokens=n, forced=forced or {}))


def _branch_and_fresh(store, seed, **params):
    parent = _run(store, seed=seed, **params)
    eos = store.get("toy").eos_ids
    prefix = [A if t.id in eos else t.id for t in parent.tokens[:3]] + [A] * (3 - len(parent.tokens[:3]))
    prefix[-1] = THE if prefix[-1] != THE else A
    branch = _run(store, forced=dict(enumerate(prefix)), seed=seed, **params)
    fresh = _run(store, prompt="1 2 " + " ".join(map(str, prefix)), seed=seed, n=5, **params)
    return prefix, branch, fresh


@pytest.mark.parametrize("seed", range(28))
def test_forcing_with_xtc_is_the_prompt_holding_the_tokens(store, seed):
    prefix, branch, fresh = _branch_and_fresh(store, seed, temperature=2.0, xtc_probability=0.5, xtc_threshold=0.1)
    assert [t.id for t in branch.tokens[3:]] == [t.id for t in fresh.tokens]
    coins = lambda t: [next(st for st in s.stages if st.name == "xtc").decision["coin"] for s in t.steps]  # noqa: E731
    assert coins(branch)[3:] == coins(fresh)


@pytest.mark.parametrize("seed", range(6))
def test_forced_tokens_do_not_teach_mirostat(store, seed):
    params = dict(temperature=2.0, mirostat_tau=1.0, mirostat_eta=0.5)
    prefix, branch, fresh = _branch_and_fresh(store, seed, **params)
    mir = lambda t: [next(st for st in s.stages if st.name == "mirostat").decision for s in t.steps]  # noqa: E731
    forced_steps, free = mir(branch)[:3], mir(branch)[3:]
    assert all(d["mu"] == d["mu_after"] == pytest.approx(2.0) for d in forced_steps)
    assert free[0]["mu"] == pytest.approx(2.0)
    assert [d["mu"] for d in free] == pytest.approx([d["mu"] for d in mir(fresh)], abs=1e-4)
    assert [t.id for t in branch.tokens[3:]] == [t.id for t in fresh.tokens]


@pytest.mark.parametrize("seed", range(6))
def test_forcing_with_xtc_under_gumbel_is_the_prompt_holding_the_tokens(store, seed):
    prefix, branch, fresh = _branch_and_fresh(store, seed, strategy="gumbel", temperature=2.0, xtc_probability=0.5,
                                              xtc_threshold=0.1, adaptive_p_target=0.3)
    assert [t.id for t in branch.tokens[3:]] == [t.id for t in fresh.tokens]


def test_forcing_with_xtc_and_mirostat_and_adaptive_p_together(store):
    params = dict(temperature=2.0, xtc_probability=0.5, xtc_threshold=0.1, mirostat_tau=1.0,
                  adaptive_p_target=0.4, order="llama.cpp")
    for seed in range(4):
        prefix, branch, fresh = _branch_and_fresh(store, seed, **params)
        assert [t.id for t in branch.tokens[3:]] == [t.id for t in fresh.tokens]


# --- 8. typical-p can cut the most probable token, as transformers does ------------------------------

def test_typical_p_cuts_the_top_token_as_transformers_does():
    from transformers.generation.logits_process import TypicalLogitsWarper
    logits = torch.tensor([[0.3] + [0.1] * 7]).log()
    out = TypicalP(0.15).apply(logits, torch.zeros(1, 1, dtype=torch.long))
    ref = TypicalLogitsWarper(mass=0.15)(torch.zeros(1, 1, dtype=torch.long), logits.clone())
    assert not torch.isfinite(out[0, 0]) and torch.equal(torch.isfinite(out), torch.isfinite(ref))
    help_text = dataclasses.fields(SamplerParams)
    typical = next(f for f in help_text if f.name == "typical_p").metadata["help"]
    assert "can cut the most probable token" in typical


# --- every parameter at the ends of its range --------------------------------------------------------

# what must be on for a parameter to matter
NEEDS = {"xtc_threshold": {"xtc_probability": 1.0}, "dry_base": {"dry_multiplier": 0.8},
         "dry_allowed_length": {"dry_multiplier": 0.8}, "dry_sequence_breakers": {"dry_multiplier": 0.8},
         "dynatemp_exponent": {"dynatemp_min": 0.5, "dynatemp_max": 1.5}, "dynatemp_min": {"dynatemp_max": 100.0},
         "dynatemp_max": {"dynatemp_min": 5e-324}, "mirostat_eta": {"mirostat_tau": 5.0},
         "adaptive_p_decay": {"adaptive_p_target": 0.3}, "penalty_last_n": {"frequency_penalty": 1.0},
         "thinking_budget": {"phase_marker": "the"}}
TINY = 5e-324  # the smallest positive float


def edge_cases() -> list[tuple[str, object]]:
    out = []
    for f in dataclasses.fields(SamplerParams):
        kind, meta = field_kind(f), f.metadata
        if kind is bool:
            out += [(f.name, True), (f.name, False)]
        if kind not in (int, float) or meta.get("low") is None:
            continue
        low, high = meta["low"], meta["high"]
        values = {low, high, 1 if kind is int else TINY, *([sys.float_info.min] if kind is float else [])}
        inside = [v for v in sorted(values) if (low < v or (v == low and not meta.get("low_open")))
                  and (v < high or (v == high and not meta.get("high_open")))]
        out += [(f.name, kind(v)) for v in inside]
    return out


def run_edge(store, model, name, value, prompt, n):
    params = {**NEEDS.get(name, {}), name: value}
    try:
        trace = run(store, Request(model, "sampling", prompt, params, seed=1, max_new_tokens=n, chat=False))
    except InvalidRequest as err:
        assert name in str(err)
        return None
    assert trace.tokens and all(t.logprob is None or not math.isnan(t.logprob) for t in trace.tokens)
    return trace


@pytest.mark.parametrize("name, value", edge_cases())
def test_every_parameter_at_its_edges_runs_or_is_refused_on_toy(store, name, value):
    run_edge(store, "toy", name, value, "1 2 3 1 2 3 1 2", 8)


def test_every_parameter_at_its_edges_runs_or_is_refused_on_smollm(store):
    refused = []
    for name, value in edge_cases():
        if run_edge(store, "smollm2-135m", name, value, " the sea the sea the sea: the", 2) is None:
            refused.append((name, value))
    # only values outside a range are refused; every edge listed is inside its range
    assert refused == []


@pytest.mark.parametrize("end", ["low", "high", "tiny"])
@pytest.mark.parametrize("order", ["transformers", "llama.cpp"])
@pytest.mark.parametrize("model, prompt", [("toy", "1 2 3 1 2 3 1 2"), ("smollm2-135m", " the sea the sea: the")])
def test_every_stage_on_at_once_at_one_end_of_its_range(store, end, order, model, prompt):
    """Every numeric knob at one end of its range together (an end that is a stage's no-op leaves it
    out), with every stage that has an on switch on: the run finishes, no probability is NaN."""
    params: dict[str, object] = {"order": order, "p_less": True, "word_bias": "hill=-100, the", "xtc_probability": 1.0,
                                 "dry_multiplier": 0.8, "mirostat_tau": 5.0, "adaptive_p_target": 0.3,
                                 "phase_marker": "the"}
    for f in dataclasses.fields(SamplerParams):
        kind, meta = field_kind(f), f.metadata
        if kind not in (int, float) or meta.get("low") is None or f.name in params:
            continue
        low, high = meta["low"], meta["high"]
        if end == "high":
            value = high * (1 - 1e-9) if meta.get("high_open") else high
        elif kind is int:
            value = max(low, 1) if end == "tiny" or meta.get("low_open") else low
        else:
            value = max(low, TINY) if end == "tiny" or meta.get("low_open") else low
            value = low + 1e-9 if meta.get("low_open") and value == low else value
        params[f.name] = kind(value)
    params["dynatemp_min"] = min(params["dynatemp_min"], params["dynatemp_max"])
    trace = run(store, Request(model, "sampling", prompt, params, seed=2, max_new_tokens=8 if model == "toy" else 3,
                               chat=False))
    assert trace.tokens and all(t.logprob is None or not math.isnan(t.logprob) for t in trace.tokens)
    assert {"p_less", "word_bias", "xtc", "dry", "mirostat", "adaptive_p"} <= set(trace.chain)


def test_a_penalty_near_0_never_makes_nan():
    from strategies.sampling.transforms import RepetitionPenalty
    logits = torch.tensor([[2.0, 0.0, -math.inf, -1.0, 5.0]])
    out = RepetitionPenalty(TINY).apply(logits, torch.tensor([[0, 1, 2, 3]]))
    big = torch.finfo(torch.float32).max
    assert out[0].tolist() == [big, 0.0, -math.inf, -0.0, 5.0]


def test_a_temperature_near_0_is_greedy_without_nan():
    from strategies.sampling.transforms import Temperature
    out = Temperature(TINY).apply(torch.tensor([[1.0, 3.0, 3.0, -math.inf, -2.0]]), torch.zeros(1, 1, dtype=torch.long))
    assert out.softmax(-1)[0].tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]


def random_edge_params(rng) -> dict[str, object]:
    """Each knob, with probability 1/2, at an end of its range or its smallest positive value, else
    uniform inside; stages switched on at random; a random order."""
    params: dict[str, object] = {}
    for f in dataclasses.fields(SamplerParams):
        kind, meta = field_kind(f), f.metadata
        if kind is bool:
            params[f.name] = rng.random() < 0.5
        if kind not in (int, float) or meta.get("low") is None:
            continue
        low, high = meta["low"], meta["high"]
        cap = meta.get("ui_max") or high
        picks = [low, high, 1 if kind is int else TINY, rng.uniform(low, cap)]
        value = rng.choice(picks) if rng.random() < 0.5 else picks[-1]
        value = min(max(value, low), high)
        if meta.get("low_open") and value == low:
            value = low + (1 if kind is int else 1e-9)
        if meta.get("high_open") and value == high:
            value = high * (1 - 1e-9)
        params[f.name] = kind(round(value) if kind is int else value)
    params["dynatemp_min"] = min(params["dynatemp_min"], params["dynatemp_max"])
    params["phase_marker"] = "the"  # a thinking budget needs a marker the model can write
    order = list(PRESET_NAMES["transformers"])
    rng.shuffle(order)
    params["order"] = ",".join(order)
    return params


@pytest.mark.parametrize("model, prompt, cases, n", [("toy", "1 2 3 1 2 3 1 2", 100, 6),
                                                     ("smollm2-135m", " the sea the sea: the", 20, 2)])
def test_random_chains_at_the_edges_run(store, model, prompt, cases, n):
    import random
    rng = random.Random(26)
    for _ in range(cases):
        params = random_edge_params(rng)
        trace = run(store, Request(model, "sampling", prompt, params, seed=rng.randrange(1000), max_new_tokens=n,
                                   chat=False))
        assert trace.tokens and all(t.logprob is None or not math.isnan(t.logprob) for t in trace.tokens), params
