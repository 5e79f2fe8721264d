"""Speculative sampling is lossless, statistically; top-K verification is not.

The "models" are fixed random tables over a 10-token vocabulary: the next-token
logits depend on the last three tokens, so the exact distribution of every
3-token continuation is a product of three table rows. 200,000 continuations
are sampled with batched speculative decoding (the drafting loop below mirrors
``ModelDraft.propose``; verification is ``strategies.speculative.verify``, the functions
the ``speculative`` strategy calls) and compared with that exact distribution
by a chi-square goodness-of-fit test and a total-variation bound.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from strategies.sampling.chain import ChainParams, apply_chain, build_chain
from strategies.speculative.verify import rejection, sample, topk

V = 10  # vocabulary
LENGTH = 3  # tokens per sampled continuation
N = 200_000  # samples per distribution
CONTEXT = 3  # the tables look at the last three tokens
ROWS = sum(V**k for k in range(CONTEXT + 1))
OFFSET = [sum(V**k for k in range(n)) for n in range(CONTEXT + 1)]
CHAINS = {"plain": ChainParams(), "truncated": ChainParams(temperature=0.8, top_k=6, top_p=0.9)}
P_VALUE = 1e-3  # a fit passes above this
DELTA = 1e-6  # the total-variation bound holds with probability at least 1 - DELTA


def tables(chain_name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(target_probs, draft_probs) after the chain and the target's own target_raw_probs, each [ROWS, V].
    The draft is a noisy target."""
    g = torch.Generator().manual_seed(1234)
    target_logits = torch.randn(ROWS, V, generator=g)
    draft_logits = 0.5 * target_logits + torch.randn(ROWS, V, generator=g)
    chain = build_chain(CHAINS[chain_name])
    context = torch.zeros(ROWS, 1, dtype=torch.long)  # context-free transforms only
    target, draft = (apply_chain(chain, x, context).softmax(-1) for x in (target_logits, draft_logits))
    return target, draft, target_logits.softmax(-1)


def row(n: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Table row of a text of length n whose last min(n, 3) tokens have base-V code ``code``."""
    return torch.tensor(OFFSET)[n.clamp(max=CONTEXT)] + code


def advance(n: torch.Tensor, code: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    code = code * V + token
    return n + 1, torch.where(n + 1 > CONTEXT, code % V**CONTEXT, code)


def exact(target: torch.Tensor) -> np.ndarray:
    """[V**3] exact probability of every 3-token continuation (index = base-V code)."""
    probs = torch.ones(1)
    n, code = torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    for _ in range(LENGTH):
        probs = (probs[:, None] * target[row(n, code)]).reshape(-1)
        n, code = advance(n.repeat_interleave(V), code.repeat_interleave(V), torch.arange(V).repeat(len(code)))
    return probs.double().numpy()


def speculative_samples(target: torch.Tensor, draft: torch.Tensor, gamma: int, verify, seed: int,
                        target_raw: torch.Tensor | None = None) -> torch.Tensor:
    """[N] codes of 3-token continuations from batched speculative decoding; ``verify`` gets
    (target_raw_probs, target_probs, draft_probs, draft_ids, generator) like the strategy's verifier."""
    target_raw = target if target_raw is None else target_raw
    draft_gen, verify_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    n = torch.zeros(N, dtype=torch.long)
    code = torch.zeros(N, dtype=torch.long)
    out = torch.zeros(N, LENGTH, dtype=torch.long)
    while int(n.min()) < LENGTH:
        states, ids, draft_rows = [(n, code)], [], []
        for _ in range(gamma):  # the draft proposes autoregressively
            q = draft[row(*states[-1])]
            token = sample(q, draft_gen)
            draft_rows.append(q)
            ids.append(token)
            states.append(advance(*states[-1], token))
        target_probs = torch.stack([target[row(*s)] for s in states], 1)
        raw_probs = torch.stack([target_raw[row(*s)] for s in states], 1)
        verdict = verify(raw_probs, target_probs, torch.stack(draft_rows, 1), torch.stack(ids, 1), verify_gen)
        new = torch.cat([torch.stack(ids, 1), verdict.next_ids[:, None]], 1)
        new.scatter_(1, verdict.n_accepted[:, None], verdict.next_ids[:, None])
        for j in range(gamma + 1):
            take = j <= verdict.n_accepted
            write = take & (n < LENGTH)
            out[write, n[write]] = new[write, j]
            n2, code2 = advance(n, code, new[:, j])
            n, code = torch.where(take, n2, n), torch.where(take, code2, code)
    return out[:, 0] * V * V + out[:, 1] * V + out[:, 2]


def direct_samples(target: torch.Tensor, seed: int) -> torch.Tensor:
    """[N] codes from plain ancestral sampling of the target: the control."""
    g = torch.Generator().manual_seed(seed)
    n, code = torch.zeros(N, dtype=torch.long), torch.zeros(N, dtype=torch.long)
    for _ in range(LENGTH):
        n, code = advance(n, code, sample(target[row(n, code)], g))
    return code


def fit(codes: torch.Tensor, expected_probs: np.ndarray) -> tuple[float, float, float, int]:
    """(chi-square p-value, total variation, its bound, samples in zero-probability cells).

    Cells with expected count below 5 are pooled (the chi-square approximation needs it). The TV
    bound: E[TV] <= 1/2 sum sqrt(p(1 - p) / N), and TV moves by at most 1/N per sample, so by
    McDiarmid's inequality TV exceeds E[TV] + sqrt(ln(1/DELTA) / 2N) with probability below DELTA.
    """
    counts = np.bincount(codes.numpy(), minlength=len(expected_probs)).astype(float)
    impossible = int(counts[expected_probs == 0].sum())
    expected = expected_probs * N
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < 5:  # fold a tiny pooled cell into the smallest big one
        obs[np.argmin(exp[:-1])] += obs[-1]
        exp[np.argmin(exp[:-1])] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    p_value = float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)
    tv = 0.5 * float(np.abs(counts / N - expected_probs).sum())
    bound = 0.5 * float(np.sqrt(expected_probs * (1 - expected_probs) / N).sum()) + math.sqrt(
        math.log(1 / DELTA) / (2 * N))
    return p_value, tv, bound, impossible


@pytest.mark.parametrize("chain_name", sorted(CHAINS))
def test_direct_sampling_passes_the_same_test(chain_name):
    """Control: the test's own machinery accepts plain samples of the target."""
    target, _, _ = tables(chain_name)
    p_value, tv, bound, impossible = fit(direct_samples(target, seed=7), exact(target))
    assert p_value > P_VALUE and tv < bound and impossible == 0, (p_value, tv, bound, impossible)


@pytest.mark.parametrize("chain_name", sorted(CHAINS))
@pytest.mark.parametrize("gamma", [1, 3])
def test_rejection_sampling_matches_the_target_exactly(chain_name, gamma):
    target, draft, _ = tables(chain_name)
    expected = exact(target)
    codes = speculative_samples(target, draft, gamma, lambda raw, t, d, i, g: rejection(t, d, i, g), seed=11 + gamma)
    p_value, tv, bound, impossible = fit(codes, expected)
    assert impossible == 0  # nothing the target's chain cut ever comes out
    assert p_value > P_VALUE, f"chi-square p = {p_value:.3g}"
    assert tv < bound, f"TV {tv:.4f} above the bound {bound:.4f}"


def test_the_draft_is_far_from_the_target():
    """Otherwise the lossless test would prove little: drafts must be rejected often."""
    target, draft, _ = tables("plain")
    p_value, tv, bound, _ = fit(direct_samples(draft, seed=3), exact(target))
    assert p_value < 1e-12 and tv > 5 * bound


def topk_first_token(target: torch.Tensor, draft: torch.Tensor, target_raw: torch.Tensor, k: int) -> np.ndarray:
    """[V] the closed-form first-token distribution of top-k verification.

    Drafted x passes when it is in the top k of the target model's own distribution (before the
    chain); otherwise the target draws from its chained distribution: so
    P(x) = draft(x) [x in top-k] + (1 - draft(top-k)) target(x).
    """
    t, d = target[0].double(), draft[0].double()
    inside = torch.zeros(V, dtype=torch.bool)
    inside[torch.topk(target_raw[0], k).indices] = True
    return (d * inside + (1 - d[inside].sum()) * t).numpy()


@pytest.mark.parametrize("chain_name", sorted(CHAINS))
@pytest.mark.parametrize("gamma", [1, 3])
def test_topk_verification_is_lossy_exactly_as_predicted(chain_name, gamma):
    """topk fails the fit to the target, and its first token follows the closed form instead."""
    target, draft, target_raw = tables(chain_name)
    k = 3
    codes = speculative_samples(target, draft, gamma, lambda raw, t, d, i, g: topk(t, d, i, g, k, raw),
                                seed=21 + gamma, target_raw=target_raw)
    p_value, tv, bound, _ = fit(codes, exact(target))
    assert p_value < 1e-12 and tv > 2 * bound, (p_value, tv, bound)
    first = codes // (V * V)
    predicted = topk_first_token(target, draft, target_raw, k)
    counts = np.bincount(first.numpy(), minlength=V)
    keep = predicted > 0
    assert counts[~keep].sum() == 0
    expected = predicted[keep] * counts.sum() / predicted[keep].sum()
    assert stats.chisquare(counts[keep], expected).pvalue > P_VALUE
    assert 0.5 * np.abs(predicted - exact_first(target)).sum() > 0.02  # it differs where the draft leans


def exact_first(target: torch.Tensor) -> np.ndarray:
    return target[0].double().numpy()
