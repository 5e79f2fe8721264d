"""Verification of drafted tokens: pure functions of (target_probs, draft_probs, draft_ids, generator).

Both functions are batched so that a statistical test can verify hundreds of
thousands of drafts at once with the very code the ``speculative`` strategy
runs on one. Shapes (B batch, G drafted tokens, V vocabulary):

    target_probs      [B, G + 1, V]  the target's distribution after the chain, at each
                                     drafted position and one more (the bonus position)
    draft_probs       [B, G, V]      the draft's distribution after the same chain
    draft_ids         [B, G]         the drafted tokens
    target_raw_probs  [B, >= G, V]   topk only: the target model's own distribution
                                     (softmax of its raw logits, before any transform)

Letters are avoided on purpose: Leviathan et al. (2022) call the target p and
the draft q, Chen et al. (2023) the other way round.

- ``rejection`` is lossless speculative sampling (Leviathan et al. 2022,
  "Fast Inference from Transformers via Speculative Decoding", Algorithm 1;
  Chen et al. 2023, "Accelerating Large Language Model Decoding with
  Speculative Sampling"): the output follows the target's distribution exactly.
- ``topk`` is the course notes' criterion (accept y_i when it is in
  TopK(f_target(. | x, y_<i)), the target model's own distribution): cheaper to
  explain, but lossy.

Greedy decoding needs no special case for ``rejection``: with temperature 0 the
chain leaves one-hot distributions, so it accepts exactly while the drafted
token is the target's argmax, and the residual is the target's argmax.

A deterministic draft (prompt lookup) passes one-hot ``draft_probs``: then a
drafted token is accepted with probability target_probs[token], and a rejection
resamples from the target with that token removed, which is still exactly the
target's distribution.

Everything here is float32 (or the inputs' dtype): Apple's MPS has no float64.
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

    p_target, q_draft: [B, G] the target's / draft's probability of each drafted token (after the chain).
    accept_prob: [B, G] the probability it was accepted with (min(1, target/draft); 1 or 0 for topk).
    u: [B, G] the uniform draw compared with accept_prob (nan for topk, which draws none).
    accepted: [B, G] bool, the token passed (every token before the first rejection).
    n_accepted: [B] long, how many drafted tokens passed.
    next_ids: [B] long, the token the target adds: resampled after a rejection, bonus when all passed.
    next_probs: [B, V] the distribution ``next_ids`` was drawn from.
    from_residual: [B] bool, ``next_probs`` is the residual norm(max(0, target - draft)); otherwise it is
        the target's own distribution after the chain (a bonus token, a topk replacement, or a
        rejection whose residual had no mass).
    raw_p_target, raw_kth: [B, G] topk only (None for rejection): the target model's own probability of
        each drafted token and the K-th largest probability of that distribution (a token passes at or
        above it).
    """

    p_target: torch.Tensor
    q_draft: torch.Tensor
    accept_prob: torch.Tensor
    u: torch.Tensor
    accepted: torch.Tensor
    n_accepted: torch.Tensor
    next_ids: torch.Tensor
    next_probs: torch.Tensor
    from_residual: torch.Tensor
    raw_p_target: torch.Tensor | None = None
    raw_kth: torch.Tensor | None = None

    @property
    def bonus(self) -> torch.Tensor:
        """[B] bool: every drafted token passed, so ``next_ids`` is the bonus token."""
        return self.n_accepted == self.p_target.shape[1]


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row: [B, V] probabilities (any positive scale) -> [B] ids.

    The exponential race, the Gumbel-max trick without its logarithm of the probabilities: with
    E_i ~ Exp(1) independent, E_i / probs_i is exponential with rate probs_i, and the smallest of
    independent exponentials is the i-th with probability probs_i / sum(probs). So
    argmax(probs / E) is an exact draw in float32 (no cumulative sum whose rounding grows with the
    vocabulary), a zero-probability token never wins, and a batch of 200,000 rows is one
    vectorised call (torch.multinomial is about 20x slower there). The sampler drafts,
    verification and the plain reference share.
    """
    u = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=torch.float32)
    exponential = -torch.log(u.clamp_min(torch.finfo(torch.float32).tiny))  # in (0, 88]: never zero
    return (probs.float() / exponential).argmax(-1)


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
    has_mass = mass > RESIDUAL_FLOOR
    next_probs = torch.where(has_mass, residual / mass.clamp_min(RESIDUAL_FLOOR), target_next)
    from_residual = has_mass[:, 0] & (n_accepted < draft_ids.shape[1])
    return Verdict(p_target, q_draft, accept_prob, u, accepted, n_accepted, sample(next_probs, generator),
                   next_probs, from_residual)


def topk(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_ids: torch.Tensor,
         generator: torch.Generator, k: int, target_raw_probs: torch.Tensor) -> Verdict:
    """The course notes' criterion: accept while the drafted token is in TopK(f_target(. | x, y_<i)).

    K is taken on ``target_raw_probs``, the target model's own distribution before any transform, so
    no setting of the chain overrides it: temperature keeps the order of the tokens (T = 0
    included), so it never changes which K tokens those are; the repetition penalty and top-k /
    top-p / min-p are not applied to it. A token counts as in the top K when its probability is at
    least the K-th largest (ties at the K-th are in). At the first miss the replacement token is drawn
    from ``target_probs`` at that position, the target's distribution after the chain (no residual);
    after G passes the bonus comes from there too. Lossy: accepted tokens follow the draft's choices
    within the target's top K, not the target, and can be tokens the target's chain cut.
    """
    _check(target_probs, draft_probs, draft_ids)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    b, g = draft_ids.shape
    if target_raw_probs.shape[0] != b or target_raw_probs.shape[1] < g or \
            target_raw_probs.shape[2] != target_probs.shape[2]:
        raise ValueError(f"shapes disagree: target_raw_probs {tuple(target_raw_probs.shape)}, "
                         f"target_probs {tuple(target_probs.shape)}, draft_ids {tuple(draft_ids.shape)}")
    raw = target_raw_probs[:, :g]
    raw_p_target = _drafted(raw, draft_ids)
    raw_kth = torch.topk(raw, min(k, raw.shape[-1]), dim=-1).values[..., -1]
    passed = raw_p_target >= raw_kth
    accepted, n_accepted = _first_rejection(passed)
    next_probs = _at(target_probs, n_accepted)
    p_target = _drafted(target_probs, draft_ids)
    return Verdict(p_target, _drafted(draft_probs, draft_ids), passed.to(p_target.dtype),
                   torch.full_like(p_target, float("nan")), accepted, n_accepted, sample(next_probs, generator),
                   next_probs, torch.zeros_like(n_accepted, dtype=torch.bool), raw_p_target, raw_kth)
