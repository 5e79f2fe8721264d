"""The five classic stages of a chain; the contract every stage keeps, ``TransformBase``, is in
strategies/stages.py.

The stages beyond these keep the same contract: truncations.py (typical-p, epsilon, eta, top-nσ,
XTC, top-H, p-less), repeats.py (DRY, no-repeat n-gram, word bias), adaptive.py (dynamic
temperature, mirostat, adaptive-p) and watermark.py (the green-list watermark).
The decisions of the stages here:

- penalty: ``penalty``; ``touched`` [batch] (distinct ids penalised); ``ids`` [batch, vocab] bool;
- temperature: ``t``;
- top_k: ``k`` (clamped); ``cut_logit``, ``cut_prob`` [batch]: the k-th logit and its probability;
- top_p: ``p``; ``rank`` [batch] (tokens kept, the boundary rank); ``mass`` [batch] (their mass);
  ``cumulative`` [batch, vocab]: the mass up to and including each token in top-p's own
  ranking (NaN beyond the sorted head, which top-p cut without summing);
- min_p: ``min_p``; ``top_prob`` [batch]; ``threshold`` [batch] = min_p x top_prob.

Edge cases, each documented here once:
- temperature 0 means greedy: only the argmax keeps a finite logit; a temperature so small that
  logits / t overflows is the same limit computed safely, (logits - max) / t (softmax is unchanged
  by the shift): the argmax and its ties keep logit 0, the rest -inf or far below;
- a penalty below 1 that would push a positive logit past the dtype's largest value stops there;
- top_k is clamped to the vocabulary; 0 disables it;
- top_p = 1 and min_p = 0 and repetition_penalty = 1 disable their transform.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from strategies.stages import Decision, TransformBase, stage

NEG_INF = float("-inf")

def divide_by_temperature(logits: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
    """logits / t; where that overflows a live logit (t near 0), (logits - max) / t, the same softmax."""
    out = logits / t
    if bool((torch.isfinite(logits) & ~torch.isfinite(out)).any()):
        shifted = logits - logits.amax(dim=-1, keepdim=True)
        out = torch.where(shifted == 0, torch.zeros_like(shifted), shifted / t)  # never 0 / 0 (t rounds to 0)
    return out


@stage("penalty", params={"penalty": "repetition_penalty"}, truncates=False, on={"repetition_penalty": 1.3})
@dataclass(frozen=True)
class RepetitionPenalty(TransformBase):
    """Penalise every token already in the context (prompt included), by CTRL's rule (Keskar et al. 2019).

    The rule of the course notes and of CTRL (Keskar et al. 2019): a positive
    logit is divided by the penalty, a negative one multiplied by it.
    """

    penalty: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        seen = torch.gather(logits, 1, context)
        scaled = torch.where(seen < 0, seen * self.penalty, seen / self.penalty)
        # a penalty near 0 (it may round to 0 in the logits' dtype): a positive logit stops at the dtype's
        # largest value, a logit of 0 stays 0 (never 0 / 0), and a token cut before stays cut (never -inf x 0)
        scaled = torch.where(scaled == float("inf"), torch.full_like(seen, torch.finfo(seen.dtype).max), scaled)
        seen = torch.where((seen == 0) | ~torch.isfinite(seen), seen, scaled)
        touched = torch.zeros_like(logits, dtype=torch.bool).scatter(1, context, True)
        return logits.scatter(1, context, seen), {"penalty": self.penalty, "touched": touched.sum(-1),
                                                  "ids": touched}


@stage("temperature", params={"t": "temperature"}, truncates=False, on={"temperature": 0.8})
@dataclass(frozen=True)
class Temperature(TransformBase):
    """Divide logits by t. t = 0 is greedy: keep only the argmax."""

    t: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        if self.t == 0:
            top = logits.argmax(dim=-1, keepdim=True)
            return torch.full_like(logits, NEG_INF).scatter(1, top, logits.gather(1, top)), {"t": 0.0}
        return divide_by_temperature(logits, self.t), {"t": self.t}


@stage("top_k", params={"k": "top_k"}, truncates=True, on={"top_k": 5})
@dataclass(frozen=True)
class TopK(TransformBase):
    """Keep the k highest logits (ties at the k-th value are kept too); top-k sampling (Fan, Lewis & Dauphin
    2018)."""

    k: int

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        k = min(self.k, logits.shape[-1])
        top = torch.topk(logits, k, dim=-1)
        kth = top.values[..., -1:]
        cut_prob = logits.softmax(-1).gather(1, top.indices[..., -1:])  # the same softmax the trace records
        return logits.masked_fill(logits < kth, NEG_INF), {"k": k, "cut_logit": kth[..., 0],
                                                           "cut_prob": cut_prob[..., 0]}


@stage("top_p", params={"p": "top_p"}, truncates=True, on={"top_p": 0.9})
@dataclass(frozen=True)
class TopP(TransformBase):
    """Nucleus (Holtzman et al. 2019): keep the smallest set of most probable
    tokens whose mass reaches p. A token is kept when the mass of the tokens
    ranked above it is still below p, so the top token is always kept.

    Rounding at the boundary: the masses are the running sums (``cumsum``) of the
    sorted probabilities in the logits' dtype, and p is compared in that dtype
    too (p rounded to it). The mass above a token is the running sum up to the
    token before it, the same number the set reaching p is judged by, never
    the running sum less the token's own probability (rounded otherwise). So a
    set whose rounded sum equals rounded p reaches p: p = 0.8 on
    [0.3, 0.1, 0.1, 0.5] keeps [0.3, 0.5] (0.5 + 0.3 rounds to float32's 0.8),
    as transformers' ``TopPLogitsWarper`` keeps.

    Only as many tokens as needed are sorted: top-64, then x4, until the mass
    of the sorted head reaches p (the full vocabulary is rarely sorted).
    """

    p: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.softmax(dim=-1)
        vocab = logits.shape[-1]
        k = min(64, vocab)
        while True:
            head, idx = torch.topk(probs, k, dim=-1)
            running = head.cumsum(-1)
            if k == vocab or bool((running[..., -1] >= self.p).all()):
                break
            k = min(vocab, k * 4)
        above = torch.cat([torch.zeros_like(running[..., :1]), running[..., :-1]], dim=-1)
        keep_sorted = above < self.p
        keep_sorted[..., 0] = True  # also where p rounds to 0 in the dtype (p = 1e-50 in float32)
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(1, idx, keep_sorted)
        cumulative = torch.full_like(probs, float("nan")).scatter(1, idx, running)
        decision = {"p": self.p, "rank": keep_sorted.sum(-1), "mass": (head * keep_sorted).sum(-1),
                    "cumulative": cumulative}
        return logits.masked_fill(~keep, NEG_INF), decision


@stage("min_p", params={"min_p": "min_p"}, truncates=True, on={"min_p": 0.05})
@dataclass(frozen=True)
class MinP(TransformBase):
    """Min-p (Nguyen et al. 2024): drop tokens whose probability is below
    min_p x the top token's probability."""

    min_p: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.softmax(dim=-1)
        top = probs.amax(dim=-1, keepdim=True)
        threshold = self.min_p * top
        return logits.masked_fill(probs < threshold, NEG_INF), {"min_p": self.min_p, "top_prob": top[..., 0],
                                                                "threshold": threshold[..., 0]}

