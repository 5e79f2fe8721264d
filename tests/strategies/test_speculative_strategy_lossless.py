"""Speculative sampling is lossless through the strategy itself: toy target, toy-small draft, a chain
with temperature, top-p and a repetition penalty, run by the engine once per seed.

The exact distribution of every continuation of up to three tokens (ending early at <eos>) is the
product of the target's chained distributions along it, each computed on the full text so far, so
the penalty sees exactly what it should. The strategy's samples are compared with it by a chi-square
test; the same samples must fail against the distributions without the penalty and without top-p,
which shows the sample size is decisive for the very stages under test.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from playground.engine import Request, run
from strategies.sampling.chain import ChainParams, apply_chain, build_chain

PROMPT = "a once upon"  # " a" is in the text, so the penalty moves the 70/30 branch
CHAIN = dict(temperature=2.0, top_p=0.9, repetition_penalty=2.0)
LENGTH = 3
N = 1000  # runs, one seed each
P_VALUE = 1e-3


def exact(lm, prompt_ids: list[int], params: ChainParams) -> dict[tuple[int, ...], float]:
    """Probability of each continuation: LENGTH tokens, or fewer ending at an end-of-text token."""
    chain = build_chain(params)
    done: dict[tuple[int, ...], float] = {}
    frontier = [((), 1.0)]
    with torch.inference_mode():
        for position in range(LENGTH):
            grown = []
            for text, p in frontier:
                context = torch.tensor([prompt_ids + list(text)])
                probs = apply_chain(chain, lm.forward(context).logits[:, -1], context).softmax(-1)[0]
                for token in (probs > 0).nonzero().flatten().tolist():
                    item = (text + (token,), p * float(probs[token]))
                    (done.__setitem__(*item) if token in lm.eos_ids or position == LENGTH - 1
                     else grown.append(item))
            frontier = grown
    return done


def chi_square(samples: list[tuple[int, ...]], expected: dict[tuple[int, ...], float]) -> tuple[float, int]:
    """(p-value, samples in cells the distribution gives nothing); cells expecting under 5 are pooled."""
    cells = sorted(expected, key=lambda c: -expected[c])
    counts = {c: 0 for c in cells}
    impossible = 0
    for s in samples:
        if s in counts:
            counts[s] += 1
        else:
            impossible += 1
    obs = np.array([counts[c] for c in cells], dtype=float)
    exp = np.array([expected[c] for c in cells]) * len(samples)
    big = exp >= 5
    obs, exp = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    if exp[-1] < 5:  # fold a tiny pooled cell into the smallest big one
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    # A sample in a cell of probability zero is a failure by itself; it is kept out of the fit.
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue), impossible


@pytest.fixture(scope="module")
def runs(store) -> list[tuple[tuple[int, ...], int]]:
    """(continuation, rounds that resampled) of each run."""
    params = {"draft": "toy-small", "gamma": 2, "measure_baseline": False, **CHAIN}
    out = []
    for seed in range(N):
        trace = run(store, Request("toy", "speculative", PROMPT, params, seed=seed, max_new_tokens=LENGTH, top_n=1))
        out.append((tuple(trace.token_ids), sum(r["resampled"] is not None for r in trace.rounds)))
    return out


@pytest.fixture(scope="module")
def samples(runs) -> list[tuple[int, ...]]:
    return [text for text, _ in runs]


def test_the_strategy_samples_the_chained_target_exactly(store, samples):
    lm = store.get("toy")
    p_value, impossible = chi_square(samples, exact(lm, lm.encode(PROMPT), ChainParams(**CHAIN)))
    assert impossible == 0, "a continuation the target's chain gives no probability came out"
    assert p_value > P_VALUE, f"chi-square p = {p_value:.3g}"


@pytest.mark.parametrize("dropped", ["repetition_penalty", "top_p"])
def test_the_sample_size_is_decisive(store, samples, dropped):
    """The same samples against the chain without one of its stages: far from it."""
    lm = store.get("toy")
    without = ChainParams(**{k: v for k, v in CHAIN.items() if k != dropped})
    expected = exact(lm, lm.encode(PROMPT), without)
    p_value, impossible = chi_square(samples, expected)
    assert p_value < 1e-6 or impossible > 0, (dropped, p_value, impossible)


def test_drafts_were_rejected_often(runs):
    """Otherwise the test would say little about rejection sampling: the residual must be drawn from."""
    assert sum(resampled for _, resampled in runs) > N // 4
