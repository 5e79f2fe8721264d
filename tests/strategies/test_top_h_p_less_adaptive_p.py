"""Top-H, p-less and adaptive-p: parity of top-H with transformers' TopHLogitsWarper, hand tables from
the definitions of p-less (arXiv 2509.23234) and adaptive-p (llama.cpp PR #17927), and adaptive-p's
state across a run against a plain loop written from llama.cpp's description."""
from __future__ import annotations

import math

import pytest
import torch
from transformers.generation.logits_process import TopHLogitsWarper

from playground.charts import samplers as charts_samplers
from playground.engine import Request, run
from strategies.sampling.adaptive import AdaptiveP
from strategies.sampling.chain import accept_chosen, record_chain
from strategies.sampling.samplers import PRESETS, SamplerParams, build_sampler_chain
from strategies.sampling.truncations import PLess, TopH
from strategies.stages import Outcome

CONTEXT = torch.zeros(1, 1, dtype=torch.long)


def random_logits(batch: int, vocab: int, seed: int, ties: bool, cut: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, vocab, generator=g) * (1 + 3 * torch.rand(batch, 1, generator=g))
    if ties:
        x = (x * 2).round() / 2  # many exact ties, at the 100th place too
    if cut:
        x = x.masked_fill(torch.rand(batch, vocab, generator=g) < cut, -math.inf)
        x[:, 0] = torch.where(torch.isfinite(x).any(-1), x[:, 0], torch.zeros(batch))
    return x


# --- top-H ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("h", [0.01, 0.2, 0.4, 0.7, 1.0])
@pytest.mark.parametrize("batch, vocab", [(1, 3), (3, 50), (2, 150), (4, 1000), (1, 49_152)])
@pytest.mark.parametrize("ties, cut", [(False, 0.0), (True, 0.0), (False, 0.5), (True, 0.97)])
def test_top_h_matches_transformers(h, batch, vocab, ties, cut):
    logits = random_logits(batch, vocab, seed=vocab + int(h * 100), ties=ties, cut=cut)
    before = logits.clone()
    ours, decision = TopH(h).decide(logits, CONTEXT)
    theirs = TopHLogitsWarper(top_h=h)(CONTEXT, logits.clone())
    assert torch.equal(logits, before)  # the input is not modified
    assert torch.equal(ours, theirs)
    assert torch.equal(decision["rank"], torch.isfinite(ours).sum(-1))


def test_top_h_hand_table():
    # p = [0.5, 0.25, 0.25]: H = 1.0397 nats; terms 0.3466, 0.3466, 0.3466: h 0.5 keeps one, 0.7 two
    logits = torch.tensor([[0.5, 0.25, 0.25]]).log()
    for h, kept in ((0.3, 1), (0.5, 1), (0.7, 2), (1.0, 3)):
        out, d = TopH(h).decide(logits, CONTEXT)
        assert int(torch.isfinite(out).sum()) == kept, h
        assert float(d["entropy"]) == pytest.approx(1.5 * math.log(2), rel=1e-6)


# --- p-less -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("probs, kept", [
    ([0.5, 0.25, 0.25], [True, False, False]),  # L = 0.375
    ([0.75, 0.25], [True, False]),  # L = 0.625
    ([0.5, 0.5], [True, True]),  # L = 0.5: a token at L is kept
    ([0.25] * 4, [True] * 4),  # uniform: L = 1/N, every token is at L
    ([0.4, 0.3, 0.2, 0.1], [True, True, False, False]),  # L = 0.30
    ([1.0, 0.0], [True, False]),  # one token holds all the mass
])
def test_p_less_hand_table(probs, kept):
    logits = torch.tensor([probs]).log()
    out, d = PLess().decide(logits, CONTEXT)
    assert torch.isfinite(out[0]).tolist() == kept
    assert float(d["threshold"]) == pytest.approx(sum(p * p for p in probs), rel=1e-6)
    assert int(d["rank"]) == sum(kept)


def test_p_less_matches_its_closed_form_on_random_logits():
    for seed in range(20):
        logits = random_logits(3, 2000, seed, ties=seed % 2 == 0, cut=0.3 if seed % 3 == 0 else 0.0)
        probs = logits.softmax(-1)
        want = logits.masked_fill(probs < probs.square().sum(-1, keepdim=True), -math.inf)
        out = PLess().apply(logits, CONTEXT)
        assert torch.equal(torch.isfinite(out), torch.isfinite(want))
        assert torch.isfinite(out).sum(-1).min() >= 1


# --- adaptive-p -------------------------------------------------------------------------------------

def shaped(p: float, aim: float) -> float:
    """llama.cpp's transform of one probability: 5 - 10 d^2 / (1 + d), d = |p - aim| / 0.3."""
    d = abs(p - aim) / 0.3
    return 5.0 - 10.0 * d * d / (1.0 + d)


def test_adaptive_p_hand_table():
    # target 0.5: the average starts at 0.5, so it aims at 0.5: p 0.5 -> 5, 0.3 -> 5 - 10 (4/9) / (5/3) = 2.333,
    # 0.2 -> 5 - 10 x 1 / 2 = 0
    stage = AdaptiveP(0.5, 0.9)
    out, d = stage.decide(torch.tensor([[0.5, 0.3, 0.2]]).log(), CONTEXT)
    assert out[0].tolist() == pytest.approx([5.0, 2.0 + 1 / 3, 0.0], abs=1e-5)
    assert float(d["average"]) == pytest.approx(0.5) and float(d["adapted"]) == pytest.approx(0.5)
    # the token of p 0.5 chosen: S = 0.5 + 0.9 x 5 = 5, W = 1 + 0.9 x 10 = 10: average 0.5
    learned = stage.accept(Outcome(torch.tensor([[0.5, 0.3, 0.2]]).log(), out, d, torch.tensor([0]), False))
    assert float(learned["average_after"]) == pytest.approx(0.5) and float(learned["chosen_prob"]) == pytest.approx(0.5)
    # target 0.2 after a pick of p 0.9: S = 0.9 + 0.5 x 0.4, W = 1 + 0.5 x 2: average 0.55, aims at 0
    stage = AdaptiveP(0.2, 0.5)
    logits = torch.tensor([[0.9, 0.05, 0.05]]).log()
    out, d = stage.decide(logits, CONTEXT)
    learned = stage.accept(Outcome(logits, out, d, torch.tensor([0]), False))
    assert float(learned["average_after"]) == pytest.approx(1.1 / 2.0)
    out, d = stage.decide(logits, CONTEXT)
    assert float(d["adapted"]) == 0.0
    assert out[0].tolist() == pytest.approx([shaped(0.9, 0.0), shaped(0.05, 0.0), shaped(0.05, 0.0)], abs=1e-5)


def test_adaptive_p_leaves_cut_tokens_cut():
    out, _ = AdaptiveP(0.3, 0.9).decide(torch.tensor([[1.0, -math.inf, 0.0]]), CONTEXT)
    assert torch.isfinite(out[0]).tolist() == [True, False, True]


def test_adaptive_p_state_across_a_run_is_llama_cpps_loop(store):
    target, decay = 0.3, 0.7
    trace = run(store, Request("toy", "sampling", "1 2", {"adaptive_p_target": target, "adaptive_p_decay": decay,
                                                         "temperature": 1.5, "min_p": 0.01},
                               seed=3, max_new_tokens=14)).to_dict()
    # the plain loop, from llama.cpp's description: S = target / (1 - decay), W = 1 / (1 - decay);
    # each step aims at clamp(2 target - S / W, 0, 1); then S = p(chosen) + decay S, W = 1 + decay W
    s, w = target / (1 - decay), 1 / (1 - decay)
    assert trace["chain"][-2:] == ["adaptive_p", "multinomial"]  # last, as llama.cpp runs it
    for step in trace["steps"]:
        names = [st["name"] for st in step["stages"]]
        k = names.index("adaptive_p")
        d = step["stages"][k]["decision"]
        assert d["average"] == pytest.approx(s / w, abs=1e-5)
        assert d["adapted"] == pytest.approx(min(1.0, max(0.0, 2 * target - s / w)), abs=1e-5)
        chosen = next(i for i, c in enumerate(step["candidates"]) if c["id"] == step["chosen"])
        p = step["stages"][k - 1]["probs"][chosen]  # the chosen token on the distribution adaptive-p received
        assert d["chosen_prob"] == pytest.approx(p, abs=1e-5)
        s, w = p + decay * s, 1 + decay * w
        assert d["average_after"] == pytest.approx(s / w, abs=1e-5)
        # what the selector drew from is llama.cpp's transform of that distribution
        aim = d["adapted"]
        ins, outs = step["stages"][k - 1]["probs"], step["stages"][k]["probs"]
        live = [i for i, c in enumerate(step["candidates"]) if step["stages"][k - 1]["kept"][i]]
        ref = [math.exp(shaped(ins[i], aim)) for i in live]
        if len(live) == step["stages"][k - 1]["kept_count"]:  # every live token is among the candidates
            assert [outs[i] for i in live] == pytest.approx([r / sum(ref) for r in ref], abs=1e-4)
    fig = charts_samplers.adaptive_p_figure(trace)
    line = next(tr for tr in fig.data if tr.name == "running average (before the step)")
    averages = [next(st for st in s_["stages"] if st["name"] == "adaptive_p")["decision"]["average"]
                for s_ in trace["steps"]]
    assert list(line.y) == averages
    assert "Adaptive-p average" in {v.title for v in charts_samplers.views(trace)}


def test_adaptive_p_off_at_a_negative_target_and_on_at_0():
    assert build_sampler_chain(SamplerParams(adaptive_p_target=-0.5)) == []
    assert [t.name for t in build_sampler_chain(SamplerParams(adaptive_p_target=0.0))] == ["adaptive_p"]


def test_new_stages_drop_out_at_their_noop_values_and_presets_place_them():
    assert build_sampler_chain(SamplerParams(top_h=0.0, p_less=False)) == []
    for preset in PRESETS.values():
        assert preset[-1] == "adaptive_p" and preset.index("p_less") == preset.index("min_p") + 1
    hf = PRESETS["transformers"]
    assert hf.index("top_h") < hf.index("top_k") and hf.index("top_h") > hf.index("temperature")


def test_accept_moves_adaptive_p_once_per_step():
    p = SamplerParams(adaptive_p_target=0.4, adaptive_p_decay=0.5)
    g = torch.Generator().manual_seed(0)
    [stage] = build_sampler_chain(p, g)
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    record = record_chain([stage], logits, CONTEXT)
    torch.rand(1, generator=g)  # a free step's selector draws
    accept_chosen([stage], record, torch.tensor([1]), forced=False)
    d = record.decisions[0]
    p1 = float(logits.softmax(-1)[0, 1])
    assert float(d["average_after"]) == pytest.approx((p1 + 0.5 * 0.8) / (1 + 0.5 * 2))
