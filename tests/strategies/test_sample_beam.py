"""Sample-then-beam draws distinct prefixes: Gumbel-top-k over prefixes under the chain's distribution."""
from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch
from beam_fakes import check_two_draws_without_replacement, final

from playground.charts.beam import tree_figure
from strategies.beam.sample_beam import SampleBeamParams, sample_beam


def test_the_reported_case_draws_three_distinct_prefixes(toy):
    # seed 5 used to draw [[3, 4], [6, 14], [3, 4]]: two identical trees, 9 results of which 6 distinct
    params = SampleBeamParams(num_beams=3, prefix_tokens=2, num_prefixes=3, temperature=3.0, length_penalty=0.0)
    trace = final(sample_beam, toy, params, [4, 4], 8, seed=5)
    prefixes = [tuple(t["prefix"]) for t in trace.beam["trees"]]
    assert len(prefixes) == 3 and len(set(prefixes)) == 3
    results = [tuple(f["token_ids"]) for f in trace.beam["finished"]]
    assert len(results) == 9 and len(set(results)) == 9
    perturbed = [t["prefix_perturbed"] for t in trace.beam["trees"]]
    assert perturbed == sorted(perturbed, reverse=True)  # trees in the order of the draw


@pytest.mark.parametrize("chain", [dict(temperature=3.0), dict(temperature=1.5, top_p=0.9),
                                   dict(repetition_penalty=1.5, min_p=0.05)], ids=str)
def test_prefixes_and_results_are_distinct_for_every_seed(toy, chain):
    for seed in range(25):
        trace = final(sample_beam, toy, SampleBeamParams(num_beams=2, prefix_tokens=2, num_prefixes=4, **chain),
                      [1, 2], 5, seed=seed)
        prefixes = [tuple(t["prefix"]) for t in trace.beam["trees"]]
        assert len(set(prefixes)) == len(prefixes) == trace.beam["prefixes_drawn"]
        results = [tuple(f["token_ids"]) for f in trace.beam["finished"]]
        assert len(set(results)) == len(results)


def test_fewer_prefixes_when_fewer_have_mass_and_the_tree_says_so(toy):
    one = final(sample_beam, toy, SampleBeamParams(num_beams=2, prefix_tokens=2, num_prefixes=3, top_k=1),
                [4, 4], 6, seed=0)
    assert one.beam["prefixes_asked"] == 3 and one.beam["prefixes_drawn"] == len(one.beam["trees"]) == 1
    assert "1 of 3 prefixes drawn" in tree_figure(json.loads(one.to_json())).layout.title.text
    two = final(sample_beam, toy, SampleBeamParams(num_beams=2, prefix_tokens=1, num_prefixes=5, top_k=2),
                [4, 4], 6, seed=0)
    assert sorted(len(t["prefix"]) for t in two.beam["trees"]) == [1, 1]
    assert len({tuple(t["prefix"]) for t in two.beam["trees"]}) == 2


def chain_logprobs(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """temperature, then top-k, written out: softmax over the k largest of logits / T."""
    scaled = logits.double() / temperature
    kth = scaled.topk(top_k, dim=-1).values[..., -1:]
    return scaled.masked_fill(scaled < kth, float("-inf")).log_softmax(-1)


def prefix_distribution(lm, prompt_ids, temperature, top_k) -> dict[tuple[int, ...], float]:
    """Every two-token prefix (EOS ends one early) under the chain, from uncached forward passes."""
    eos = min(lm.eos_ids)
    with torch.no_grad():
        first = chain_logprobs(lm.model(torch.tensor([prompt_ids])).logits[0, -1], temperature, top_k)
        xs = [x for x in range(lm.vocab_size) if x != eos and first[x] > float("-inf")]
        second = chain_logprobs(lm.model(torch.tensor([prompt_ids + [x] for x in xs])).logits[:, -1],
                                temperature, top_k)
    probs = {(eos,): math.exp(first[eos])} if first[eos] > float("-inf") else {}
    for i, x in enumerate(xs):
        for y in range(lm.vocab_size):
            if second[i, y] > float("-inf"):
                probs[(x, y)] = math.exp(first[x] + second[i, y])
    return probs


def test_prefixes_are_a_sample_without_replacement_from_the_chain(toy):
    """Two prefixes of two tokens over 1000 seeds, chain = temperature 2.5 then top-k 8.

    The first prefix drawn (the largest perturbed score) is an exact sample: its frequency must
    match the chain's prefix probability p. The pair is a sample without replacement: each
    prefix's inclusion frequency must match p_t + sum_{y != t} p_y p_t / (1 - p_y). |f - pi| <=
    4.5 sd fails with probability < 7e-6 per check when the sampler is right (normal tail,
    pi N > 20); drawing with replacement, or a deterministic pair, misses these bounds.
    """
    prompt_ids, temperature, top_k, runs = [4, 4], 2.5, 8, 1000
    probs = prefix_distribution(toy, prompt_ids, temperature, top_k)
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-6)
    params = SampleBeamParams(num_beams=2, prefix_tokens=2, num_prefixes=2, temperature=temperature, top_k=top_k)
    included, first = Counter(), Counter()
    for seed in range(runs):
        trace = final(sample_beam, toy, params, prompt_ids, 2, seed=seed, top_n=1)
        drawn = [tuple(t["prefix"]) for t in trace.beam["trees"]]
        assert len(drawn) == 2 and drawn[0] != drawn[1]
        included.update(drawn)
        first[drawn[0]] += 1
    check_two_draws_without_replacement(probs, included, first, runs)


def test_prefix_steps_carry_the_chain_and_the_drawn_probability(toy):
    params = SampleBeamParams(num_beams=3, prefix_tokens=2, num_prefixes=2, temperature=2.5, top_k=8)
    trace = final(sample_beam, toy, params, [4, 4], 6, seed=11)
    assert trace.chain == ["temperature", "top_k", "gumbel-top-k", "beam"]
    assert len(trace.steps) == len(trace.tokens)
    for step, token in zip(trace.steps[:2], trace.tokens[:2]):
        assert [st.name for st in step.stages] == ["raw", "temperature", "top_k"]
        chosen = next(c for c in step.candidates if c.id == token.id)
        assert chosen.kept and math.log(chosen.prob) == pytest.approx(token.logprob, abs=1e-5)
        assert math.log(chosen.raw_prob) == pytest.approx(token.raw_logprob, abs=1e-5)
