"""Logit transforms: small pure objects, ``apply(logits, context) -> logits``.

Shapes: ``logits`` is ``[batch, vocab]`` float, ``context`` is ``[batch, seq]``
long (every token so far, prompt included). No transform modifies its input.
Every transform keeps at least one token (the most probable one).

Edge cases, each documented here once:
- temperature 0 means greedy: only the argmax keeps a finite logit;
- top_k is clamped to the vocabulary; 0 disables it;
- top_p = 1 and min_p = 0 and repetition_penalty = 1 disable their transform.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

NEG_INF = float("-inf")


@dataclass(frozen=True)
class RepetitionPenalty:
    """Penalise every token already in the context (prompt included).

    The rule of the course notes and of CTRL (Keskar et al. 2019): a positive
    logit is divided by the penalty, a negative one multiplied by it.
    """

    penalty: float
    name = "penalty"

    def apply(self, logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        seen = torch.gather(logits, 1, context)
        seen = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        return logits.scatter(1, context, seen)


@dataclass(frozen=True)
class Temperature:
    """Divide logits by t. t = 0 is greedy: keep only the argmax."""

    t: float
    name = "temperature"

    def apply(self, logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        if self.t == 0:
            top = logits.argmax(dim=-1, keepdim=True)
            return torch.full_like(logits, NEG_INF).scatter(1, top, logits.gather(1, top))
        return logits / self.t


@dataclass(frozen=True)
class TopK:
    """Keep the k highest logits (ties at the k-th value are kept too)."""

    k: int
    name = "top_k"

    def apply(self, logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        k = min(self.k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, NEG_INF)


@dataclass(frozen=True)
class TopP:
    """Nucleus (Holtzman et al. 2019): keep the smallest set of most probable
    tokens whose mass reaches p. A token is kept when the mass of the tokens
    ranked above it is still below p, so the top token is always kept.

    Only as many tokens as needed are sorted: top-64, then x4, until the mass
    of the sorted head reaches p (the full vocabulary is rarely sorted).
    """

    p: float
    name = "top_p"

    def apply(self, logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(dim=-1)
        vocab = logits.shape[-1]
        k = min(64, vocab)
        while True:
            head, idx = torch.topk(probs, k, dim=-1)
            if k == vocab or bool((head.sum(-1) >= self.p).all()):
                break
            k = min(vocab, k * 4)
        keep_sorted = (head.cumsum(-1) - head) < self.p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(1, idx, keep_sorted)
        return logits.masked_fill(~keep, NEG_INF)


@dataclass(frozen=True)
class MinP:
    """Min-p (Nguyen et al. 2024): drop tokens whose probability is below
    min_p x the top token's probability."""

    min_p: float
    name = "min_p"

    def apply(self, logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(dim=-1)
        threshold = self.min_p * probs.amax(dim=-1, keepdim=True)
        return logits.masked_fill(probs < threshold, NEG_INF)


Transform = RepetitionPenalty | Temperature | TopK | TopP | MinP
