"""Stages that adapt to the distribution or to the text so far: dynamic temperature and mirostat v2.

Decisions (per row unless a plain number):
- dynamic_temperature: ``min``, ``max``, ``exponent``; ``entropy`` (nats), ``normalized`` (entropy /
  log of the number of tokens still alive) and ``t``: the temperature it divided by;
- mirostat: ``tau``, ``eta``; ``mu`` (the surprise cap in bits it truncated at) and ``threshold`` =
  2^-mu (the probability at that surprise); after the token is chosen, ``feed_back`` adds
  ``surprise`` (bits, of the chosen token on mirostat's own output) and ``mu_after``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from strategies.sampling.transforms import NEG_INF, Decision, TransformBase


@dataclass(frozen=True)
class DynamicTemperature(TransformBase):
    """Entropy-scaled temperature, as llama.cpp documents its dynatemp: with H the entropy of the
    distribution received and N the number of tokens it still holds,
    T = min + (max - min) x (H / log N)^exponent. A confident step (low H) gets a temperature near
    ``min``, a flat one near ``max``. With one token left T = min."""

    t_min: float
    t_max: float
    exponent: float
    name = "dynamic_temperature"

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        logp = logits.float().log_softmax(dim=-1)
        ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
        alive = torch.isfinite(logits).sum(-1)
        normalized = torch.where(alive > 1, ent / alive.clamp(min=2).float().log(), torch.zeros_like(ent))
        normalized = normalized.clamp(0.0, 1.0)  # rounding can put a uniform row a hair above 1
        t = self.t_min + (self.t_max - self.t_min) * normalized.pow(self.exponent)
        decision = {"min": self.t_min, "max": self.t_max, "exponent": self.exponent, "entropy": ent,
                    "normalized": normalized, "t": t}
        return logits / t.to(logits.dtype)[..., None], decision


@dataclass
class Mirostat(TransformBase):
    """Mirostat 2.0 (Basu et al. 2021, "Mirostat: A Neural Text Decoding Algorithm that Directly
    Controls Perplexity", Algorithm 2): keep the tokens whose surprise -log2 p is at most mu (the
    most probable one always), then, once the token X is chosen, move mu towards the target surprise
    tau: mu <- mu - eta x (S(X) - tau), with S(X) = -log2 of X's probability on the truncated,
    renormalised distribution (llama.cpp documents the same update). mu starts at 2 tau.

    Stateful: one object per decoding run, its ``mu`` ([batch], bits) advanced by ``feed_back``.
    """

    tau: float
    eta: float
    mu: torch.Tensor | None = field(default=None)
    name = "mirostat"

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        if self.mu is None:
            # float32: a device without float64 (Apple's MPS) runs it too
            self.mu = torch.full(logits.shape[:-1], 2.0 * self.tau, dtype=torch.float32, device=logits.device)
        probs = logits.softmax(dim=-1)
        threshold = torch.exp2(-self.mu).to(probs.dtype)
        remove = (probs < threshold[..., None]) & (logits < logits.amax(dim=-1, keepdim=True))
        decision = {"tau": self.tau, "eta": self.eta, "mu": self.mu.clone(), "threshold": threshold}
        return logits.masked_fill(remove, NEG_INF), decision

    def feed_back(self, out: torch.Tensor, chosen: torch.Tensor, decision: Decision) -> None:
        """``out``: the logits this stage returned [batch, vocab]; ``chosen``: [batch] ids drawn."""
        logp = out.float().log_softmax(dim=-1).gather(-1, chosen.view(-1, 1))[..., 0]
        surprise = -logp / math.log(2.0)
        self.mu = decision["mu"] - self.eta * (surprise - self.tau)
        decision["surprise"] = surprise
        decision["mu_after"] = self.mu.clone()
