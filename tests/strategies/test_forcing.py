"""Forced tokens (a branch): recorded on the step, and the seed-stream rule of strategies.forcing."""
import pytest

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.tools.toy import WORDS

A, THE = WORDS.index("a"), WORDS.index("the")
HOT = {"temperature": 2.0}  # toy's paths are near-certain after the branch; T = 2 makes every step random


def _run(store, strategy="greedy", prompt="1 2", forced=None, seed=0, n=6, **params):
    return run(store, Request(model="toy", strategy=strategy, prompt=prompt, params=params, seed=seed,
                              max_new_tokens=n, forced=forced or {}))


def test_forced_step_is_recorded_with_the_strategys_own_choice(store):
    trace = _run(store, forced={0: "the"})
    assert trace.text.startswith("the hill rose high")
    first = trace.steps[0]
    assert first.chosen == THE and trace.tokens[0].id == THE
    assert first.extra["forced"] is True
    assert first.extra["strategy_choice"] == A and first.extra["strategy_choice_text"] == " a"
    assert all("forced" not in s.extra for s in trace.steps[1:])
    chosen = next(c for c in first.candidates if c.id == THE)
    assert trace.tokens[0].logprob == pytest.approx(__import__("math").log(chosen.prob), abs=1e-5)
    assert trace.to_dict()["steps"][0]["forced"] is True


@pytest.mark.parametrize("strategy, params", [
    ("sampling", HOT), ("gumbel", HOT),
    ("contrastive", {**HOT, "amateur": "toy-small", "selector": "multinomial", "alpha": 0.0}),
])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forcing_a_prefix_continues_as_a_prompt_holding_it(store, strategy, params, seed):
    """A forced step draws nothing: forcing steps 0..f is the run whose prompt holds those tokens."""
    parent = _run(store, strategy, seed=seed, n=8, **params)
    prefix = [t.id for t in parent.tokens[:3]]
    prefix[-1] = THE if prefix[-1] != THE else A  # the branch: a token the parent did not take at step 2
    branch = _run(store, strategy, forced=dict(enumerate(prefix)), seed=seed, n=8, **params)
    fresh = _run(store, strategy, prompt="1 2 " + " ".join(map(str, prefix)), seed=seed, n=5, **params)
    assert [t.id for t in branch.tokens[:3]] == prefix
    assert [t.id for t in branch.tokens[3:]] == [t.id for t in fresh.tokens]
    for b, f in zip(branch.tokens[3:], fresh.tokens):
        assert b.logprob == pytest.approx(f.logprob, abs=1e-4)
    assert [s.extra.get("forced", False) for s in branch.steps[:3]] == [True] * 3


def test_forcing_one_step_keeps_the_steps_before_it(store):
    parent = _run(store, "sampling", seed=5, n=8, **HOT)
    other = THE if parent.tokens[4].id != THE else A
    branch = _run(store, "sampling", forced={4: other}, seed=5, n=8, **HOT)
    assert [t.id for t in branch.tokens[:4]] == [t.id for t in parent.tokens[:4]]
    assert branch.tokens[4].id == other
    assert branch.steps[4].extra["strategy_choice"] == parent.tokens[4].id


def test_a_token_the_chain_cut_can_be_forced(store):
    trace = _run(store, "sampling", forced={0: "the"}, top_k=1)
    assert trace.tokens[0].id == THE and trace.to_dict()["tokens"][0]["logprob"] is None
    assert next(c for c in trace.steps[0].candidates if c.id == THE).kept is False


@pytest.mark.parametrize("strategy, params", [("beam", {}), ("speculative", {"draft": "toy-small"}),
                                              ("stochastic_beam", {})])
def test_beam_and_speculative_refuse_forced_tokens(store, strategy, params):
    with pytest.raises(InvalidRequest, match=f"not {strategy}: .* put the prefix in the prompt"):
        _run(store, strategy, forced={0: 9}, **params)


@pytest.mark.parametrize("forced, message", [
    ({6: 9}, "forced steps must be integers in [0, 5], got 6"),
    ({-1: 9}, "forced steps must be integers in [0, 5], got -1"),
    ({"x": 9}, "forced steps must be integers in [0, 5], got 'x'"),
    ({0: 16}, "forced token ids must be in [0, 15], got 16"),
    ({0: "dragon"}, "must be in the vocabulary of toy, got 'dragon'"),
    ({0: "the hill"}, "must map to exactly one token of toy, got 'the hill' (2 tokens"),
])
def test_bad_forced_tokens_name_the_range(store, forced, message):
    with pytest.raises(InvalidRequest) as err:
        _run(store, forced=forced)
    assert message in str(err.value)
