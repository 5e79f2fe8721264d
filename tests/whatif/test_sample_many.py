"""Sample many: frequencies against the exact chained distribution, batched rows equal single runs."""
import math

import pytest
import torch

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.whatif.sample_many import enumerate_outcomes, goodness_of_fit, sample_many
from strategies.sampling.chain import apply_chain
from strategies.sampling.transforms import Temperature

PATH_A = " a time there lived happily ever"  # toy's 70% path after "1 2" (8 tokens with <eos> cut at 8)


def _sample(store, strategy="sampling", n=1000, tokens=8, batched=True, seed=0, **params):
    return sample_many(store, Request(model="toy", strategy=strategy, prompt="1 2", params=params, seed=seed,
                                      max_new_tokens=tokens), n, batched)


def _by_seed(result):
    return {seed: tuple(o["ids"]) for o in result["outcomes"] for seed in o["seeds"]}


def test_toy_branch_frequencies_pass_chi_square_against_the_exact_ones(store, toy):
    result = _sample(store)
    first = {o["text"]: o for o in result["outcomes"]}
    a, the = first[PATH_A.strip()], first["the hill rose high happily ever"]
    assert sum(o["count"] for o in result["outcomes"]) == 1000
    assert a["count"] / 1000 == pytest.approx(0.70, abs=0.05) and the["count"] / 1000 == pytest.approx(0.30, abs=0.05)
    assert result["chi_square"]["p_value"] > 0.01 and result["tv_distance"] < 0.05
    # The exact probability is the product of the model's own next-token probabilities along the path.
    ids = torch.tensor([[1, 2] + a["ids"]])
    with torch.no_grad():
        probs = toy.model(ids).logits[0].softmax(-1)
    by_hand = math.prod(float(probs[1 + i, t]) for i, t in enumerate(a["ids"]))
    assert a["probability"] == pytest.approx(by_hand, rel=1e-4)


@pytest.mark.parametrize("strategy, params", [("sampling", {"temperature": 2.0, "top_k": 4}),
                                              ("gumbel", {"temperature": 2.0})])
def test_batched_rows_equal_single_runs_seed_by_seed(store, strategy, params):
    batched = _sample(store, strategy, n=120, tokens=5, seed=40, **params)
    one_by_one = _sample(store, strategy, n=120, tokens=5, seed=40, batched=False, **params)
    assert batched["batched"] and not one_by_one["batched"]
    assert len(batched["outcomes"]) > 10  # T = 2 spreads the samples over many outcomes
    mismatches = [s for s, ids in _by_seed(batched).items() if _by_seed(one_by_one)[s] != ids]
    assert mismatches == []
    for o in batched["outcomes"][:3]:
        other = next(x for x in one_by_one["outcomes"] if x["ids"] == o["ids"])
        assert other["probability"] == pytest.approx(o["probability"], rel=1e-4)


def test_a_samples_seed_replayed_as_one_run_writes_the_same_text(store):
    result = _sample(store, "sampling", n=200, tokens=6, seed=7, temperature=1.5)
    rare = [o for o in result["outcomes"] if o["count"] == 1][:5]
    assert rare
    for o in rare:
        trace = run(store, Request(model="toy", strategy="sampling", prompt="1 2", seed=o["seeds"][0],
                                   max_new_tokens=6, params={"temperature": 1.5}))
        assert trace.token_ids == o["ids"] and trace.text == o["text"]


def test_many_outcomes_pass_chi_square_batched_and_one_by_one(store):
    for batched in (True, False):
        result = _sample(store, "sampling", n=600, tokens=3, batched=batched, temperature=2.5, top_k=5)
        assert result["chi_square"]["bins"] >= 5
        assert result["chi_square"]["p_value"] > 0.01, result["chi_square"]


def test_speculative_rejection_matches_the_target_and_topk_does_not(store):
    common = dict(draft="toy-small", gamma=4)
    lossless = _sample(store, "speculative", n=300, **common)
    lossy = _sample(store, "speculative", n=300, verify="topk", verify_top_k=2, **common)
    assert "target" in lossless["reference"] and not lossless["batched"]
    assert lossless["chi_square"]["p_value"] > 0.01
    assert lossy["chi_square"]["p_value"] < 1e-3 and lossy["tv_distance"] > 0.05


def test_stochastic_beam_counts_inclusion(store):
    one = _sample(store, "stochastic_beam", n=200, num_beams=1)
    assert one["chi_square"]["p_value"] > 0.01
    two = _sample(store, "stochastic_beam", n=100, num_beams=2)
    assert sum(o["count"] for o in two["outcomes"]) == 200  # two distinct sequences per sample
    assert two["chi_square"] is None and "none" in two["reference"]
    top = two["outcomes"][:2]
    assert all(o["count"] > 90 for o in top)  # both paths are nearly always among the two
    assert all(o["frequency"] >= o["probability"] for o in top)


def test_enumeration_finds_every_outcome_above_tau(toy):
    exact = enumerate_outcomes(toy, [1, 2], [Temperature(2.0)], 3, 0.001)
    total = sum(math.exp(v) for v in exact.values())
    assert 0.5 < total <= 1.0 + 1e-9 and all(math.exp(v) >= 0.001 for v in exact.values())
    cut = enumerate_outcomes(toy, [1, 2], [Temperature(2.0)], 3, 0.01)
    assert set(cut) == {k for k, v in exact.items() if math.exp(v) >= 0.01}


@pytest.mark.parametrize("key, prompt, t", [("toy", "1 2", 3.0), ("smollm2-135m", "The capital of France is", 1.0)])
def test_enumerated_probabilities_equal_a_full_forward_of_each_outcome(store, key, prompt, t):
    """The enumeration reuses KV-cache rows step to step; each outcome's log-probability must equal the
    chained log-probabilities of one forward pass over prompt + outcome."""
    lm = store.get(key)
    ids = lm.encode(prompt, "", False)
    chain = [Temperature(t)]
    exact = enumerate_outcomes(lm, ids, chain, 3, 0.002)
    assert len(exact) >= 3
    for outcome, logprob in sorted(exact.items(), key=lambda kv: -kv[1])[:5]:
        full = torch.tensor([ids + list(outcome)])
        logits = lm.forward(full).logits[0]
        by_hand = 0.0
        for j, token in enumerate(outcome):
            pos = len(ids) + j - 1
            step = apply_chain(chain, logits[pos:pos + 1], full[:, :pos + 1]).log_softmax(-1)
            by_hand += float(step[0, token])
        assert logprob == pytest.approx(by_hand, abs=1e-4)


def test_goodness_of_fit_on_a_hand_made_table():
    exact = {(1,): 0.5, (2,): 0.3}
    test, tv = goodness_of_fit({(1,): 50, (2,): 30, (3,): 20}, exact, 100)
    assert test["statistic"] == pytest.approx(0.0) and test["p_value"] == pytest.approx(1.0) and tv == 0
    test, tv = goodness_of_fit({(1,): 80, (2,): 20}, exact, 100)
    by_hand = (80 - 50) ** 2 / 50 + (20 - 30) ** 2 / 30 + (0 - 20) ** 2 / 20
    assert test["statistic"] == pytest.approx(by_hand) and test["df"] == 2
    assert tv == pytest.approx(0.5 * (30 + 10 + 20) / 100)


@pytest.mark.parametrize("n, tokens, strategy, message", [
    (0, 8, "sampling", "n must be an integer in [1, 1000], got 0"),
    (1001, 8, "sampling", "n must be an integer in [1, 1000], got 1001"),
    (10, 65, "sampling", "tokens must be an integer in [1, 64] for sample many, got 65"),
    (10, 8, "beam", "beam search is deterministic"),
])
def test_bad_sizes_name_the_range(store, n, tokens, strategy, message):
    with pytest.raises(InvalidRequest) as err:
        _sample(store, strategy, n=n, tokens=tokens)
    assert message in str(err.value)


def test_greedy_gives_one_outcome_of_probability_one(store):
    result = _sample(store, "greedy", n=50, tokens=4)
    assert [(o["text"], o["count"], o["probability"]) for o in result["outcomes"]] == [("a time there lived", 50, 1.0)]
    assert result["chi_square"] is None and result["tv_distance"] == 0


def test_contrastive_outcomes_carry_their_own_probability_without_a_test(store):
    result = _sample(store, "contrastive", n=30, tokens=3, amateur="toy-small", selector="multinomial")
    assert not result["batched"] and result["chi_square"] is None and "none" in result["reference"]
    assert sum(o["count"] for o in result["outcomes"]) == 30
    assert all(0 < o["probability"] <= 1 for o in result["outcomes"])


def test_stages_without_a_closed_form_run_one_by_one_with_no_exact_reference(store):
    """XTC draws a coin and mirostat keeps a state: sample many runs them one seed at a time and
    claims no exact probability; the plain five stages keep their batched path and reference."""
    from playground.whatif.sample_many import sample_many
    xtc = sample_many(store, Request("toy", "sampling", "1 2", {"xtc_probability": 1.0, "xtc_threshold": 0.1},
                                     seed=0, max_new_tokens=1), 20)
    assert xtc["batched"] is False and xtc["chi_square"] is None and xtc["reference"].startswith("none")
    assert sum(o["count"] for o in xtc["outcomes"]) == 20
    assert [o["text"] for o in xtc["outcomes"]] == ["the"]  # XTC removed the 70% token at every draw
    plain = sample_many(store, Request("toy", "sampling", "1 2", {"top_k": 2}, seed=0, max_new_tokens=1), 20)
    assert plain["batched"] is True and plain["chi_square"] is not None
