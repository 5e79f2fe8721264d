"""Stages that adapt to the distribution or to the text so far: dynamic temperature, mirostat v2 and
adaptive-p.

Decisions (per row unless a plain number):
- dynamic_temperature: ``min``, ``max``, ``exponent``; ``entropy`` (nats), ``normalized`` (entropy /
  log of the number of tokens still alive) and ``t``: the temperature it divided by;
- mirostat: ``tau``, ``eta``; ``mu`` (the surprise cap in bits it truncated at) and ``threshold`` =
  2^-mu (the probability at that surprise); after the token is chosen, ``accept`` adds
  ``surprise`` (bits, of the chosen token on mirostat's own output) and ``mu_after``;
- adaptive_p: ``target``, ``decay``; ``average`` (the running average of the chosen tokens'
  probabilities before this step) and ``adapted`` = clamp(2 target - average, 0, 1), the probability
  it favoured; after the token is chosen, ``accept`` adds ``chosen_prob`` (the chosen token's
  probability on the distribution adaptive-p received) and ``average_after``.

The stateful stages (mirostat, adaptive-p) learn from the tokens the selector drew, not from forced
ones: a forced token (strategies/forcing.py) is what a prompt holding it would be, and a prompt
teaches them nothing. So at a forced step ``accept`` records what the step was and keeps the state:
forcing steps 0 .. f gives, from step f + 1 on, the run whose prompt holds those tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from strategies.sampling.transforms import NEG_INF, divide_by_temperature
from strategies.stages import Decision, Outcome, TransformBase, stage


@stage("dynamic_temperature", params={"t_min": "dynatemp_min", "t_max": "dynatemp_max", "exponent": "dynatemp_exponent"},
       truncates=False, on={"dynatemp_min": 0.5, "dynatemp_max": 1.5})
@dataclass(frozen=True)
class DynamicTemperature(TransformBase):
    """Entropy-scaled temperature, as llama.cpp documents its dynatemp: with H the entropy of the
    distribution received and N the number of tokens it still holds,
    T = min + (max - min) x (H / log N)^exponent. A confident step (low H) gets a temperature near
    ``min``, a flat one near ``max``. With one token left T = min."""

    t_min: float
    t_max: float
    exponent: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        logp = logits.float().log_softmax(dim=-1)
        ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
        alive = torch.isfinite(logits).sum(-1)
        normalized = torch.where(alive > 1, ent / alive.clamp(min=2).float().log(), torch.zeros_like(ent))
        normalized = normalized.clamp(0.0, 1.0)  # rounding can put a uniform row a hair above 1
        t = self.t_min + (self.t_max - self.t_min) * normalized.pow(self.exponent)
        decision = {"min": self.t_min, "max": self.t_max, "exponent": self.exponent, "entropy": ent,
                    "normalized": normalized, "t": t}
        return divide_by_temperature(logits, t.to(logits.dtype)[..., None]), decision


@stage("mirostat", params={"tau": "mirostat_tau", "eta": "mirostat_eta"}, truncates=True, on={"mirostat_tau": 3.0})
@dataclass
class Mirostat(TransformBase):
    """Mirostat 2.0 (Basu et al. 2021, "Mirostat: A Neural Text Decoding Algorithm that Directly
    Controls Perplexity", Algorithm 2): keep the tokens whose surprise -log2 p is at most mu (the
    most probable one always), then, once the token X is chosen, move mu towards the target surprise
    tau: mu <- mu - eta x (S(X) - tau), with S(X) = -log2 of X's probability on the truncated,
    renormalised distribution (llama.cpp documents the same update). mu starts at 2 tau.

    Stateful: one object per decoding run, its ``mu`` ([batch], bits; 2 tau until the first token)
    advanced by ``accept``. A forced token does not move mu: a prompt holding it would not have taught
    mu either.
    """

    tau: float
    eta: float
    mu: torch.Tensor | None = field(default=None)

    def _mu(self, logits: torch.Tensor) -> torch.Tensor:
        if self.mu is not None:
            return self.mu
        # float32: a device without float64 (Apple's MPS) runs it too
        return torch.full(logits.shape[:-1], 2.0 * self.tau, dtype=torch.float32, device=logits.device)

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        mu = self._mu(logits)
        probs = logits.softmax(dim=-1)
        threshold = torch.exp2(-mu).to(probs.dtype)
        remove = (probs < threshold[..., None]) & (logits < logits.amax(dim=-1, keepdim=True))
        decision = {"tau": self.tau, "eta": self.eta, "mu": mu.clone(), "threshold": threshold}
        return logits.masked_fill(remove, NEG_INF), decision

    def accept(self, outcome: Outcome) -> Decision:
        """The chosen token's surprise (bits, on mirostat's own output) and mu after it: moved by a
        drawn token, kept by a forced one."""
        surprise = -outcome.out.float().log_softmax(dim=-1).gather(-1, outcome.chosen.view(-1, 1))[..., 0] \
            / math.log(2.0)
        mu_after = outcome.decision["mu"]
        if not outcome.forced:
            mu_after = self.mu = mu_after - self.eta * (surprise - self.tau)
        return {"surprise": surprise, "mu_after": mu_after.clone()}


ADAPTIVE_P_WIDTH, ADAPTIVE_P_PEAK, ADAPTIVE_P_SHARPNESS = 0.3, 5.0, 10.0  # llama.cpp's fixed shape


@stage("adaptive_p", params={"target": "adaptive_p_target", "decay": "adaptive_p_decay"}, truncates=False,
       on={"adaptive_p_target": 0.3})
@dataclass
class AdaptiveP(TransformBase):
    """Adaptive-p (llama.cpp PR #17927, from MrJackSpade's adaptive-p; koboldcpp ships it too):
    favour the tokens whose probability is near a target, steering the running average of the chosen
    tokens' probabilities towards ``target``.

    With p the distribution received and A the running average, the adapted target is
    a = clamp(2 target - A, 0, 1) (too many probable picks lately: aim lower), and each live token's
    logit becomes PEAK - SHARPNESS x d^2 / (1 + d), d = |p - a| / WIDTH (5, 10, 0.3: llama.cpp's
    constants); a token an earlier stage cut stays cut. Once the token X is chosen, with its
    probability p(X) on the distribution received: S <- p(X) + decay x S, W <- 1 + decay x W, A = S / W.
    S and W start at target / (1 - decay) and 1 / (1 - decay), so A starts at the target.

    llama.cpp's adaptive-p samples the token itself and must run last; here, as mirostat is fitted,
    the stage returns the reshaped logits and the chain's selector draws from them: the same
    distribution, and the chosen token fed back the same way. Its place in both presets is last.
    A forced token does not move the average, as llama.cpp's accept ignores a token it did not select.
    """

    target: float
    decay: float
    weighted_sum: torch.Tensor | None = field(default=None)
    total_weight: torch.Tensor | None = field(default=None)

    def _state(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, W): the running sums, or where they start before the first token."""
        if self.weighted_sum is not None and self.total_weight is not None:
            return self.weighted_sum, self.total_weight
        shape = logits.shape[:-1]
        return (torch.full(shape, self.target / (1.0 - self.decay), device=logits.device),
                torch.full(shape, 1.0 / (1.0 - self.decay), device=logits.device))

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        weighted_sum, total_weight = self._state(logits)
        probs = logits.float().softmax(dim=-1)
        average = weighted_sum / total_weight
        adapted = (2.0 * self.target - average).clamp(0.0, 1.0)
        d = (probs - adapted[..., None]).abs() / ADAPTIVE_P_WIDTH
        shaped = ADAPTIVE_P_PEAK - ADAPTIVE_P_SHARPNESS * d * d / (1.0 + d)
        out = torch.where(torch.isfinite(logits), shaped.to(logits.dtype), logits)
        decision = {"target": self.target, "decay": self.decay, "average": average, "adapted": adapted}
        return out, decision

    def accept(self, outcome: Outcome) -> Decision:
        """The chosen token's probability on the distribution adaptive-p received, and the average after
        it: moved by a drawn token, kept by a forced one."""
        weighted_sum, total_weight = self._state(outcome.received)
        p = outcome.received.float().softmax(dim=-1).gather(-1, outcome.chosen.view(-1, 1))[..., 0]
        if not outcome.forced:
            weighted_sum, total_weight = p + self.decay * weighted_sum, 1.0 + self.decay * total_weight
            self.weighted_sum, self.total_weight = weighted_sum, total_weight
        return {"chosen_prob": p, "average_after": weighted_sum / total_weight}
