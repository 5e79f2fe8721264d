"""Verification of drafted tokens: pure functions of (target_probs, draft_probs, draft_ids, generator).

Both functions are batched so that a statistical test can verify hundreds of
thousands of drafts at once with the very code the ``speculative`` strategy
runs on one. Shapes (B batch, G drafted tokens, V vocabulary):

    target_probs  [B, G + 1, V]  the target's distribution after the chain, at each
                                 drafted position and one more (the bonus position)
    draft_probs   [B, G, V]      the draft's distribution after the same chain
    draft_ids     [B, G]         the drafted tokens

Letters are avoided on purpose: Leviathan et al. (2022) call the target p and
the draft q, Chen et al. (2023) the other way round.

- ``rejection`` is lossless speculative sampling (Leviathan et al. 2022,
  "Fast Inference from Transformers via Speculative Decoding", Algorithm 1;
  Chen et al. 2023, "Accelerating Large Language Model Decoding with
  Speculative Sampling"): the output follows the target's distribution exactly.
- ``topk`` is the course notes' criterion (accept while the drafted token is in
  the target's top-K): cheaper to explain, but lossy.

Greedy decoding needs no special case: with temperature 0 the chain leaves
one-hot distributions, so ``rejection`` accepts exactly while the drafted token
is the target's argmax, and the residual is the target's argmax.

A deterministic draft (prompt lookup) passes one-hot ``draft_probs``: then a
drafted token is accepted with probability target_probs[token], and a rejection
resamples from the target with that token removed, which is still exactly the
target's distribution.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Below this residual mass a rejection can only be float rounding (target and draft agree);
# the next token is then drawn from the target itself rather than from normalised noise.
RESIDUAL_FLOOR = 1e-9


@dataclass
class Verdict:
    """What verification decided for each of B drafts of G tokens.

    p_target, q_draft: [B, G] the target's / draft's probability of each drafted token.
    accept_prob: [B, G] the probability it was accepted with (min(1, target/draft); 1 or 0 for topk).
    u: [B, G] the uniform draw compared with accept_prob (nan for topk, which draws none).
    accepted: [B, G] bool, the token is in the output (every token before the first rejection).
    n_accepted: [B] long, how many drafted tokens were kept.
    next_ids: [B] long, the token the target adds: resampled after a rejection, bonus when all passed.
    next_probs: [B, V] the distribution ``next_ids`` was drawn from (the residual, or the target's).
    """

    p_target: torch.Tensor
    q_draft: torch.Tensor
    accept_prob: torch.Tensor
    u: torch.Tensor
    accepted: torch.Tensor
    n_accepted: torch.Tensor
    next_ids: torch.Tensor
    next_probs: torch.Tensor

    @property
    def bonus(self) -> torch.Tensor:
        """[B] bool: every drafted token passed, so ``next_ids`` is the bonus token."""
        return self.n_accepted == self.p_target.shape[1]


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row by inverting the CDF: [B, V] probabilities (any positive scale) -> [B] ids.

    The sampler drafts, verification and the plain reference share. Token i comes out when
    cdf[i - 1] <= u < cdf[i], so a zero-probability token never does; float64 keeps the
    cumulative sum exact enough for a 262k vocabulary, and one uniform per row makes a batch of
    200,000 draws cheap (torch.multinomial is about 20x slower there).
    """
    cdf = probs.double().cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=torch.float64)
    ids = (cdf <= u * cdf[:, -1:]).sum(-1).clamp(max=probs.shape[-1] - 1)
    # u * total can round up to the total itself; take the last token with mass then.
    empty = probs.gather(-1, ids.unsqueeze(-1)).squeeze(-1) <= 0
    if bool(empty.any()):
        ids[empty] = probs.shape[-1] - 1 - (probs[empty].flip(-1) > 0).long().argmax(-1)
    return ids


def _check(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_ids: torch.Tensor) -> None:
    b, g = draft_ids.shape
    if target_probs.shape[:2] != (b, g + 1) or draft_probs.shape[:2] != (b, g):
        raise ValueError(f"shapes disagree: target_probs {tuple(target_probs.shape)}, draft_probs "
                         f"{tuple(draft_probs.shape)}, draft_ids {tuple(draft_ids.shape)}")


def _drafted(probs: torch.Tensor, draft_ids: torch.Tensor) -> torch.Tensor:
    """[B, >=G, V] probabilities, [B, G] ids -> [B, G] the probability of each drafted id."""
    return probs[:, : draft_ids.shape[1]].gather(-1, draft_ids.unsqueeze(-1)).squeeze(-1)


def _at(probs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """[B, N, V] rows picked at [B] positions -> [B, V]."""
    return probs[torch.arange(probs.shape[0], device=probs.device), index]


def _first_rejection(passed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, G] per-token test results -> (accepted prefix [B, G] bool, its length [B])."""
    accepted = passed.long().cumprod(dim=1).bool()
    return accepted, accepted.sum(dim=1)


def rejection(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_ids: torch.Tensor,
              generator: torch.Generator) -> Verdict:
    """Lossless speculative sampling (Leviathan et al. 2022, Algorithm 1; Chen et al. 2023, Algorithm 2).

    Each drafted token x is accepted with probability min(1, target(x) / draft(x)): when the draft is
    not more confident than the target it always passes. At the first rejection the rest is dropped and
    the target's token is drawn from the residual norm(max(0, target - draft)) at that position; when
    all G pass, one bonus token is drawn from target_probs[:, G]. Inputs are not modified.
    """
    _check(target_probs, draft_probs, draft_ids)
    p_target = _drafted(target_probs, draft_ids)
    q_draft = _drafted(draft_probs, draft_ids)
    # A drafted token always has q_draft > 0 (it was drawn from the draft); the clamp only keeps the
    # division finite for hand-made inputs.
    accept_prob = (p_target / q_draft.clamp_min(torch.finfo(q_draft.dtype).tiny)).clamp(max=1.0)
    u = torch.rand(p_target.shape, generator=generator, device=p_target.device, dtype=p_target.dtype)
    accepted, n_accepted = _first_rejection(u < accept_prob)
    # A zero row after the last drafted position makes the bonus draw the residual of "no draft".
    padded = torch.cat([draft_probs, draft_probs.new_zeros(draft_probs.shape[0], 1, draft_probs.shape[2])], 1)
    target_next = _at(target_probs, n_accepted)
    residual = (target_next - _at(padded, n_accepted)).clamp_min(0.0)
    mass = residual.sum(-1, keepdim=True)
    next_probs = torch.where(mass > RESIDUAL_FLOOR, residual / mass.clamp_min(RESIDUAL_FLOOR), target_next)
    return Verdict(p_target, q_draft, accept_prob, u, accepted, n_accepted, sample(next_probs, generator),
                   next_probs)


def topk(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_ids: torch.Tensor,
         generator: torch.Generator, k: int) -> Verdict:
    """The course notes' criterion: accept while the drafted token is in the target's top-k.

    A token counts as in the top-k when its target probability is at least the k-th largest and above
    zero (a token the target's own chain cut is never accepted). At the first miss the target draws its
    own token from target_probs at that position; after k passes the bonus comes from the target too.
    Lossy: accepted tokens follow the draft's choices within the target's top-k, not the target.
    """
    _check(target_probs, draft_probs, draft_ids)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    p_target = _drafted(target_probs, draft_ids)
    q_draft = _drafted(draft_probs, draft_ids)
    kth = torch.topk(target_probs[:, : draft_ids.shape[1]], min(k, target_probs.shape[-1]), dim=-1).values[..., -1]
    passed = (p_target >= kth) & (p_target > 0)
    accepted, n_accepted = _first_rejection(passed)
    next_probs = _at(target_probs, n_accepted)
    return Verdict(p_target, q_draft, passed.to(p_target.dtype), torch.full_like(p_target, float("nan")),
                   accepted, n_accepted, sample(next_probs, generator), next_probs)
