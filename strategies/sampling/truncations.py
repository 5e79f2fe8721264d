"""Truncations beyond top-k / top-p / min-p: typical-p, epsilon, eta, top-nσ and XTC.

Shapes and contract as ``TransformBase`` (strategies/sampling/transforms.py) states them:
``decide(logits [batch, vocab], context [batch, seq]) -> (new logits, decision)``, the input never
modified, the most probable token always kept. Decisions (per row unless a plain number):

- typical_p: ``p``; ``entropy``; ``rank`` (tokens kept); ``mass`` (their mass); ``cumulative``
  [batch, vocab]: the mass up to each token in typical's own ranking (by |-log p - H|);
- epsilon: ``epsilon``; ``threshold`` = epsilon;
- eta: ``eta``; ``entropy``; ``threshold`` = min(eta, sqrt(eta) exp(-H));
- top_nsigma: ``n``; ``max_logit``, ``sigma``, ``threshold_logit`` = max - n sigma, and
  ``threshold_prob``: the probability a token at that logit has on the stage's input;
- xtc: ``probability``, ``threshold``; ``coin`` (the uniform drawn); ``acted`` (bool);
  ``removed`` (how many top tokens it removed).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from strategies.sampling.transforms import NEG_INF, Decision, TransformBase


def _keep_top(remove: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``remove`` [batch, vocab] bool, with the most probable token of each row (and its ties) spared."""
    return remove & (logits < logits.amax(dim=-1, keepdim=True))


@dataclass(frozen=True)
class TypicalP(TransformBase):
    """Locally typical sampling (Meister et al. 2022, "Locally Typical Sampling", TACL): rank tokens by
    how far their surprise -log p is from the entropy H, and keep the closest ones until their mass
    reaches p (the token that crosses p is kept, with its ties)."""

    p: float
    name = "typical_p"

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        logp = logits.log_softmax(dim=-1)
        probs = logp.exp()
        ent = -(logp * probs).nansum(-1, keepdim=True)  # -inf * 0 is NaN: a cut token adds nothing
        distance, idx = torch.sort((-logp - ent).abs(), dim=-1)
        running = logits.gather(-1, idx).softmax(dim=-1).cumsum(dim=-1)
        last = (running < self.p).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)
        remove_sorted = distance > distance.gather(-1, last)
        remove_sorted[..., 0] = False
        remove = remove_sorted.scatter(-1, idx, remove_sorted)
        keep = ~remove
        decision = {"p": self.p, "entropy": ent[..., 0], "rank": keep.sum(-1), "mass": (probs * keep).sum(-1),
                    "cumulative": torch.empty_like(running).scatter(-1, idx, running)}
        return logits.masked_fill(remove, NEG_INF), decision


@dataclass(frozen=True)
class Epsilon(TransformBase):
    """Epsilon sampling (Hewitt, Manning & Liang 2022, "Truncation Sampling as Language Model
    Desmoothing"): drop tokens whose probability is below epsilon."""

    epsilon: float
    name = "epsilon"

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.softmax(dim=-1)
        remove = _keep_top(probs < self.epsilon, logits)
        threshold = torch.full(logits.shape[:-1], self.epsilon, dtype=probs.dtype, device=logits.device)
        return logits.masked_fill(remove, NEG_INF), {"epsilon": self.epsilon, "threshold": threshold}


@dataclass(frozen=True)
class Eta(TransformBase):
    """Eta sampling (Hewitt, Manning & Liang 2022): an entropy-dependent epsilon,
    threshold = min(eta, sqrt(eta) x exp(-H)), H the entropy in nats of the distribution received."""

    eta: float
    name = "eta"

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.softmax(dim=-1)
        ent = torch.distributions.Categorical(logits=logits).entropy()
        eta = torch.tensor(self.eta, dtype=probs.dtype, device=logits.device)
        threshold = torch.minimum(eta, eta.sqrt() * torch.exp(-ent))
        remove = _keep_top(probs < threshold[..., None], logits)
        return logits.masked_fill(remove, NEG_INF), {"eta": self.eta, "entropy": ent, "threshold": threshold}


@dataclass(frozen=True)
class TopNSigma(TransformBase):
    """Top-nσ (Tang et al. 2024, "Top-nσ: Not All Logits Are You Need"): keep the tokens whose logit
    is at least max - n·σ, σ the standard deviation of the logits. Logits an earlier stage cut
    (-inf) are left out of the mean and σ, as llama.cpp documents for its top_n_sigma sampler.
    Dividing every logit by a temperature scales max and σ alike, so the kept set does not depend on
    the temperature."""

    n: float
    name = "top_nsigma"

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        alive = torch.isfinite(logits)
        count = alive.sum(-1, keepdim=True)
        values = logits.masked_fill(~alive, 0.0)
        mean = values.sum(-1, keepdim=True) / count
        sigma = (((values - mean) * alive) ** 2).sum(-1, keepdim=True).div(count).sqrt()
        top = logits.amax(dim=-1, keepdim=True)
        threshold = top - self.n * sigma
        remove = logits < threshold
        threshold_prob = (threshold - logits.logsumexp(dim=-1, keepdim=True)).exp()
        decision = {"n": self.n, "max_logit": top[..., 0], "sigma": sigma[..., 0],
                    "threshold_logit": threshold[..., 0], "threshold_prob": threshold_prob[..., 0]}
        return logits.masked_fill(remove, NEG_INF), decision


@dataclass(frozen=True)
class XTC(TransformBase):
    """Exclude top choices (XTC, as documented by text-generation-webui and llama.cpp): with
    probability ``probability``, remove every token whose probability is at least ``threshold``
    except the least probable of them. It acts only when two or more tokens pass the threshold, so a
    threshold above 0.5 never acts. The coin is one uniform per row from the request's generator,
    drawn at every step whether or not the stage then acts."""

    probability: float
    threshold: float
    generator: torch.Generator
    name = "xtc"

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        coin = torch.rand(logits.shape[:-1], generator=self.generator, device=logits.device)
        probs = logits.softmax(dim=-1)
        above = probs >= self.threshold
        acted = (coin < self.probability) & (above.sum(-1) >= 2)
        least = probs.masked_fill(~above, float("inf")).amin(dim=-1, keepdim=True)
        remove = above & (probs > least) & acted[..., None]
        decision = {"probability": self.probability, "threshold": self.threshold, "coin": coin, "acted": acted,
                    "removed": remove.sum(-1)}
        return logits.masked_fill(remove, NEG_INF), decision
