"""The arithmetic of contrastive decoding, as pure functions of two logit tensors.

Contrastive decoding (Li et al. 2022, "Contrastive Decoding: Open-ended Text
Generation as Optimization") scores a token by how much more the expert likes
it than the amateur does, but only among tokens the expert itself finds
plausible:

    V_head = { x : p_expert(x) >= alpha * max_w p_expert(w) }
    score(x) = log p_expert(x) - lambda * log p_amateur(x)   for x in V_head
             = -inf                                           otherwise

with the amateur read at temperature tau: ``p_amateur = softmax(amateur_logits / tau)``.
lambda = 1 is the paper's original objective; O'Brien & Lewis (2023) write the
same family as ``(1 + beta) log p_e - beta log p_a``. DoLa (Chuang et al.
2023) uses the same mask and difference with an earlier layer of the expert as
the amateur.

The mask is what keeps the difference sane: without it (alpha = 0) a token the
amateur finds absurd gets a huge score even when the expert finds it absurd
too. It is computed in log space (``log p_e >= max log p_e + log alpha``), so
alpha = 1 keeps exactly the expert's top token(s) and alpha = 0 keeps every
token with a finite logit.

Greedy selection over the scores breaks ties by the expert's log-probability,
then by the lowest token id; so with an amateur identical to the expert and
lambda = 1 (every plausible score is 0) it falls back to expert greedy.

Shapes: every tensor is ``[..., vocab]``; the functions never modify their inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

NEG_INF = float("-inf")


@dataclass(frozen=True)
class ContrastiveScores:
    """One step's contrastive quantities, all ``[..., vocab]`` float32 except where noted."""

    expert_logprobs: torch.Tensor
    amateur_logprobs: torch.Tensor  # at the amateur temperature
    plausible: torch.Tensor  # bool: in V_head
    scores: torch.Tensor  # expert - lambda * amateur, for every token (unmasked, for display)
    masked_scores: torch.Tensor  # scores with -inf outside V_head: what the selector sees
    threshold: torch.Tensor  # [..., 1] the alpha line, as an expert log-probability


def plausible_mask(expert_logprobs: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask [..., vocab] bool, threshold [..., 1]): tokens with ``p >= alpha * max p``.

    The top token always passes (log alpha <= 0), so the set is never empty.
    """
    log_alpha = math.log(alpha) if alpha > 0 else NEG_INF
    threshold = expert_logprobs.amax(dim=-1, keepdim=True) + log_alpha
    return expert_logprobs >= threshold, threshold


def contrastive_scores(expert_logits: torch.Tensor, amateur_logits: torch.Tensor, alpha: float,
                       strength: float, amateur_temperature: float = 1.0) -> ContrastiveScores:
    """Expert and amateur logits [..., vocab] -> the mask and the scores (Li et al. 2022).

    ``strength`` is lambda. lambda = 0 leaves the expert's own log-probabilities on V_head.
    """
    if expert_logits.shape != amateur_logits.shape:
        raise ValueError(f"expert and amateur logits differ in shape: {tuple(expert_logits.shape)} "
                         f"vs {tuple(amateur_logits.shape)}")
    expert_logprobs = expert_logits.float().log_softmax(dim=-1)
    amateur_logprobs = (amateur_logits.float() / amateur_temperature).log_softmax(dim=-1)
    plausible, threshold = plausible_mask(expert_logprobs, alpha)
    # lambda = 0 must not turn a -inf amateur log-probability into nan (0 * -inf).
    scores = expert_logprobs - strength * amateur_logprobs if strength else expert_logprobs.clone()
    masked = scores.masked_fill(~plausible, NEG_INF)
    return ContrastiveScores(expert_logprobs, amateur_logprobs, plausible, scores, masked, threshold)


def pick_greedy(scores: torch.Tensor, expert_logprobs: torch.Tensor) -> torch.Tensor:
    """argmax of ``scores`` [..., vocab] -> ids [...]; ties go to the higher expert log-probability,
    then to the lower token id (torch.argmax returns the first maximum)."""
    best = scores.amax(dim=-1, keepdim=True)
    tied = scores == best
    return expert_logprobs.masked_fill(~tied, NEG_INF).argmax(dim=-1)
