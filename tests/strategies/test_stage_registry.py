"""The sampler stages' registry (strategies/stages.py): one declaration per stage, read by the chain
builders, the presets and the trace; and the stage life cycle (pure decide, accept told of forcing)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from playground.charts.marks import STAGE_MARKS, STAGE_SUMMARIES
from playground.engine import Request, run
from playground.errors import InvalidRequest
from strategies.phases import PHASE_FIELDS
from strategies.sampling.adaptive import AdaptiveP, Mirostat
from strategies.sampling.chain import STAGE_NAMES, ChainParams, accept_chosen, build_chain, record_chain
from strategies.sampling.repeats import PresenceFrequency
from strategies.sampling.samplers import PRESETS, SAMPLER_STAGES, WATCHING_FIELDS, SamplerParams, build_sampler_chain
from strategies.sampling.transforms import MinP, Temperature, TopK, TopP
from strategies.sampling.truncations import XTC, Epsilon
from strategies.stages import STAGES, Outcome, stage
from tests.word_lm import WordLM

FROM_PARAMS = sorted(n for n, s in STAGES.items() if s.params)
CONTEXT = torch.zeros(1, 1, dtype=torch.long)
STRING_VALUES = {"word_bias": "w1=-2", "synthid_keys": "1,2"}  # a value that turns each text switch on


def away_from_noop(name: str) -> list:
    """Values of SamplerParams field ``name`` other than its no-op, inside its range: a step either
    side, and half way to either end."""
    f = next(f for f in dataclasses.fields(SamplerParams) if f.name == name)
    noop, low, high = f.metadata["noop"], f.metadata["low"], f.metadata["high"]
    if isinstance(noop, bool):
        return [not noop]
    if isinstance(noop, str):
        return [STRING_VALUES[name]]
    step = f.metadata.get("step") or 0.1
    values = [noop + step, noop - step, (noop + high) / 2, (noop + low) / 2]
    return [type(noop)(v) for v in values if low <= v <= high and v != noop]


def turned_on(name: str) -> list[SamplerParams]:
    out = []
    for value in away_from_noop(name):
        try:
            out.append(SamplerParams(**{name: value}))
        except InvalidRequest:  # out of a cross-field rule (dynatemp_min above dynatemp_max)
            continue
    return out


def test_every_sampler_parameter_belongs_to_one_registered_stage_and_presets_list_them_all():
    owners: dict[str, list[str]] = {}
    for spec in STAGES.values():
        for name in spec.params.values():
            owners.setdefault(name, []).append(spec.name)
    fields = [f.name for f in dataclasses.fields(SamplerParams)
              if f.name != "order" and f.name not in WATCHING_FIELDS | set(PHASE_FIELDS)]
    assert {n: o for n, o in owners.items() if len(o) != 1} == {}
    assert sorted(fields) == sorted(owners)
    assert sorted(f.name for f in dataclasses.fields(ChainParams) if f.name != "order") == sorted(
        name for s in STAGE_NAMES for name in STAGES[s].params.values())
    for preset in PRESETS.values():
        assert sorted(preset) == FROM_PARAMS
    assert set(STAGE_NAMES) <= set(SAMPLER_STAGES)


@pytest.mark.parametrize("name", FROM_PARAMS)
def test_a_stage_is_on_exactly_when_one_of_its_switches_leaves_its_noop(name):
    spec = STAGES[name]
    defaults = SamplerParams()
    assert not spec.is_on(defaults)
    switches = spec.switches(defaults)
    assert switches, f"{name} has no parameter with a no-op value: nothing could turn it off"
    for field in switches:
        on = [p for p in turned_on(field) if spec.is_on(p)]
        assert on, f"no value of {field} away from its no-op turns {name} on"
        for params in on:
            assert [t.name for t in build_sampler_chain(params, torch.Generator(), WordLM("w{}"))] == [name]
            assert isinstance(spec.build(params, torch.Generator(), WordLM("w{}")), spec.cls)


def test_the_plain_chain_is_built_from_the_same_registry():
    p = ChainParams(temperature=0.5, top_k=3, min_p=0.1, order="min_p,top_k,penalty,temperature,top_p")
    assert [t.name for t in build_chain(p)] == ["min_p", "top_k", "temperature"]
    assert build_chain(ChainParams()) == []


def test_a_negative_adaptive_target_and_a_blank_word_list_are_the_off_values():
    p = SamplerParams(adaptive_p_target=-0.5, word_bias="   ")
    assert (p.adaptive_p_target, p.word_bias) == (-1.0, "")
    assert build_sampler_chain(p, torch.Generator(), WordLM("w{}")) == []


def test_a_stage_name_registers_once():
    with pytest.raises(RuntimeError, match="registered twice"):
        stage("top_k", truncates=True)(type("Again", (), {}))


def test_every_recorded_stage_says_whether_it_truncates_as_registered(store):
    params = {"top_k": 5, "temperature": 0.8, "repetition_penalty": 1.2, "dry_multiplier": 0.5, "mirostat_tau": 3.0,
              "adaptive_p_target": 0.3, "xtc_probability": 0.5}
    trace = run(store, Request("toy", "sampling", "1 2", params, seed=3, max_new_tokens=4)).to_dict()
    recorded = {st["name"]: st.get("truncates", False) for s in trace["steps"] for st in s["stages"]}
    assert recorded.pop("raw") is False
    assert recorded == {n: STAGES[n].truncates for n in recorded} and len(recorded) == 7
    assert {n for n, t in recorded.items() if t} == {"top_k", "mirostat", "xtc"}


def test_decide_is_pure_and_accept_moves_the_state_only_for_a_drawn_token():
    logits = torch.tensor([[0.5, 0.25, 0.125, 0.125]]).log()
    for make in (lambda: Mirostat(1.0, 0.1), lambda: AdaptiveP(0.3, 0.5)):
        s = make()
        (out1, d1), (out2, d2) = s.decide(logits, CONTEXT), s.decide(logits, CONTEXT)
        assert torch.equal(out1, out2) and all(torch.equal(torch.as_tensor(d1[k]), torch.as_tensor(d2[k])) for k in d1)
        forced = s.accept(Outcome(logits, out1, d1, torch.tensor([1]), forced=True))
        assert torch.equal(s.decide(logits, CONTEXT)[0], out1)  # a forced token teaches nothing
        drawn = s.accept(Outcome(logits, out1, d1, torch.tensor([1]), forced=False))
        assert set(forced) == set(drawn) and not torch.equal(s.decide(logits, CONTEXT)[0], out1)


def test_xtc_takes_its_coin_back_at_a_forced_step_only():
    g = torch.Generator().manual_seed(5)
    xtc = XTC(0.5, 0.2, g)
    start = g.get_state()
    record = record_chain([xtc], torch.zeros(1, 6), CONTEXT)
    accept_chosen([xtc], record, torch.tensor([0]), forced=True)
    assert torch.equal(g.get_state(), start)
    record_chain([xtc], torch.zeros(1, 6), CONTEXT)
    accept_chosen([xtc], record, torch.tensor([0]), forced=False)
    assert not torch.equal(g.get_state(), start)


def test_accept_adds_what_a_stage_learned_without_editing_the_decision_it_returned():
    m = Mirostat(1.0, 0.1)
    record = record_chain([m], torch.tensor([[0.5, 0.25, 0.25]]).log(), CONTEXT)
    returned = record.decisions[0]
    accept_chosen([m], record, torch.tensor([0]), forced=False)
    assert "mu_after" in record.decisions[0] and "mu_after" not in returned


def test_every_registered_stage_is_drawn_with_a_mark_or_summed_up():
    assert sorted(set(STAGES) - set(STAGE_MARKS) - set(STAGE_SUMMARIES)) == []


@pytest.mark.parametrize("build, message", [
    (lambda: MinP(1.05), "min_p must be in [0, 1], got 1.05"),  # would cut every token
    (lambda: TopP(0.0), "top_p must be in (0, 1], got 0"),
    (lambda: TopK(-3), "top_k must be in [0, 1000000], got -3"),
    (lambda: Temperature(-1.0), "temperature must be in [0, 100], got -1"),
    (lambda: Epsilon(1.0), "epsilon_cutoff must be in [0, 1), got 1"),
    (lambda: Mirostat(5.0, eta=0.0), "mirostat_eta must be in (0, 1], got 0"),
    (lambda: XTC(0.5, 1.5, torch.Generator()), "xtc_threshold must be in [0, 1], got 1.5"),
    (lambda: PresenceFrequency(-2.5), "presence_penalty must be in [-2, 2], got -2.5"),
    (lambda: TopK(True), "top_k must be an integer, got True"),
])
def test_a_stage_built_directly_is_checked_in_its_constructor(build, message):
    """Sample many and the tools build stages without a request: the constructor refuses what the request
    would, naming the value and the range (a ValueError, as transformers' warpers raise)."""
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value) == message


@pytest.mark.parametrize("name", FROM_PARAMS)
def test_every_stage_built_directly_refuses_a_value_past_its_range(name):
    """Each numeric field of every registered stage, set just past its parameter's range, is refused in the
    stage's constructor; its own defaults pass."""
    spec = STAGES[name]
    fields = {f.name: f for f in dataclasses.fields(SamplerParams)}
    for field, param_name in spec.params.items():
        meta = fields[param_name].metadata
        if not isinstance(fields[param_name].default, (int, float)) or isinstance(fields[param_name].default, bool):
            continue
        over = meta["high"] + (1 if fields[param_name].type == "int" else 0.5)
        settings = spec.settings(SamplerParams(**STRING_VALUES if name in ("word_bias", "synthid") else {}))
        with pytest.raises(InvalidRequest, match=rf"^{param_name} must be in "):
            spec.cls.from_settings({**settings, field: over}, torch.Generator(), WordLM("w{}"))
