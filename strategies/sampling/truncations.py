"""Truncations beyond top-k / top-p / min-p: typical-p, epsilon, eta, top-nσ, XTC, top-H and p-less.

Shapes and contract as ``TransformBase`` (strategies/sampling/transforms.py) states them:
``decide(logits [batch, vocab], context [batch, seq]) -> (new logits, decision)``, the input never
modified, at least one token kept. Every stage here keeps the most probable token but two: typical-p
keeps the most *typical* one, which need not be the most probable (transformers' rule too), and XTC,
whose whole point is to remove the top tokens (it keeps the least probable of those above its
threshold). Decisions (per row unless a plain number):

- typical_p: ``p``; ``entropy``; ``rank`` (tokens kept); ``mass`` (their mass); ``cumulative``
  [batch, vocab]: the mass up to each token in typical's own ranking (by |-log p - H|);
- epsilon: ``epsilon``; ``threshold`` = epsilon;
- eta: ``eta``; ``entropy``; ``threshold`` = min(eta, sqrt(eta) exp(-H));
- top_nsigma: ``n``; ``max_logit``, ``sigma``, ``threshold_logit`` = max - n sigma, and
  ``threshold_prob``: the probability a token at that logit has on the stage's input;
- xtc: ``probability``, ``threshold``; ``coin`` (the uniform drawn); ``acted`` (bool);
  ``removed`` (how many top tokens it removed);
- top_h: ``h``; ``entropy`` (nats, of the top-100 distribution), ``tau`` = h x entropy; ``rank`` (tokens
  kept); ``cut_prob``: the probability of the least probable token kept, on the distribution received;
- p_less: ``threshold`` = sum p^2 (the collision probability of the distribution received); ``rank``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.sampling.transforms import NEG_INF
from strategies.stages import Decision, Outcome, TransformBase, stage


def _keep_top(remove: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``remove`` [batch, vocab] bool, with the most probable token of each row (and its ties) spared."""
    return remove & (logits < logits.amax(dim=-1, keepdim=True))


@stage("typical_p", params={"p": "typical_p"}, truncates=True, on={"typical_p": 0.9})
@dataclass(frozen=True)
class TypicalP(TransformBase):
    """Locally typical sampling (Meister et al. 2022, "Locally Typical Sampling", TACL): rank tokens by
    how far their surprise -log p is from the entropy H, and keep the closest ones until their mass
    reaches p (the token that crosses p is kept, with its ties).

    The most typical token is always kept, not the most probable: when the top token's surprise is
    far from the entropy (p = [0.3, 0.1 x 7], mass 0.15 keeps one 0.1 token and cuts the 0.3 one), it
    is cut, exactly as transformers' ``TypicalLogitsWarper`` cuts it."""

    p: float

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


@stage("epsilon", params={"epsilon": "epsilon_cutoff"}, truncates=True, on={"epsilon_cutoff": 0.01})
@dataclass(frozen=True)
class Epsilon(TransformBase):
    """Epsilon sampling (Hewitt, Manning & Liang 2022, "Truncation Sampling as Language Model
    Desmoothing"): drop tokens whose probability is below epsilon."""

    epsilon: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.softmax(dim=-1)
        remove = _keep_top(probs < self.epsilon, logits)
        threshold = torch.full(logits.shape[:-1], self.epsilon, dtype=probs.dtype, device=logits.device)
        return logits.masked_fill(remove, NEG_INF), {"epsilon": self.epsilon, "threshold": threshold}


@stage("eta", params={"eta": "eta_cutoff"}, truncates=True, on={"eta_cutoff": 0.01})
@dataclass(frozen=True)
class Eta(TransformBase):
    """Eta sampling (Hewitt, Manning & Liang 2022): an entropy-dependent epsilon,
    threshold = min(eta, sqrt(eta) x exp(-H)), H the entropy in nats of the distribution received."""

    eta: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.softmax(dim=-1)
        ent = torch.distributions.Categorical(logits=logits).entropy()
        eta = torch.tensor(self.eta, dtype=probs.dtype, device=logits.device)
        threshold = torch.minimum(eta, eta.sqrt() * torch.exp(-ent))
        remove = _keep_top(probs < threshold[..., None], logits)
        return logits.masked_fill(remove, NEG_INF), {"eta": self.eta, "entropy": ent, "threshold": threshold}


@stage("top_nsigma", params={"n": "top_nsigma"}, truncates=True, on={"top_nsigma": 1.5})
@dataclass(frozen=True)
class TopNSigma(TransformBase):
    """Top-nσ (Tang et al. 2024, "Top-nσ: Not All Logits Are You Need"): keep the tokens whose logit
    is at least max - n·σ, σ the standard deviation of the logits. Logits an earlier stage cut
    (-inf) are left out of the mean and σ, as llama.cpp documents for its top_n_sigma sampler.
    Dividing every logit by a temperature scales max and σ alike, so the kept set does not depend on
    the temperature."""

    n: float

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


@stage("xtc", params={"probability": "xtc_probability", "threshold": "xtc_threshold"}, truncates=True,
       on={"xtc_probability": 0.5, "xtc_threshold": 0.1})
@dataclass
class XTC(TransformBase):
    """Exclude top choices (XTC, as documented by text-generation-webui and llama.cpp): with
    probability ``probability``, remove every token whose probability is at least ``threshold``
    except the least probable of them. It acts only when two or more tokens pass the threshold, so a
    threshold above 0.5 never acts. Only tokens still alive pass: a token an earlier stage cut
    (probability 0) never counts, so at threshold 0 XTC keeps the least probable live token. Exactly
    one token is kept, as in llama.cpp: of several tied at the least passing probability, the one with
    the lowest id.

    The coin is one uniform per row from the request's generator, drawn at every step whether or not
    the stage then acts; ``decide`` notes where the generator stood before the draw. At a forced step
    (strategies/forcing.py) ``accept`` takes the coin back: the generator returns there, so a forced
    step draws nothing.
    """

    probability: float
    threshold: float
    generator: torch.Generator
    before: torch.Tensor | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: dict[str, Any], generator: torch.Generator | None = None,
                      lm: LanguageModel | None = None) -> "XTC":
        if generator is None:
            raise InvalidRequest("xtc needs the request's generator")
        return cls(**settings, generator=generator)

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        self.before = self.generator.get_state()
        coin = torch.rand(logits.shape[:-1], generator=self.generator, device=logits.device)
        probs = logits.softmax(dim=-1)
        above = (probs >= self.threshold) & torch.isfinite(logits)
        acted = (coin < self.probability) & (above.sum(-1) >= 2)
        least = probs.masked_fill(~above, float("inf")).amin(dim=-1, keepdim=True)
        spared = (above & (probs == least)).to(torch.uint8).argmax(dim=-1, keepdim=True)  # the lowest id
        remove = (above & acted[..., None]).scatter(-1, spared, False)
        decision = {"probability": self.probability, "threshold": self.threshold, "coin": coin, "acted": acted,
                    "removed": remove.sum(-1)}
        return logits.masked_fill(remove, NEG_INF), decision

    def accept(self, outcome: Outcome) -> Decision:
        """A forced step: the coin is taken back (the generator returns to its state before the draw)."""
        if outcome.forced and self.before is not None:
            self.generator.set_state(self.before)
        return {}


@stage("top_h", params={"h": "top_h"}, truncates=True, on={"top_h": 0.6})
@dataclass(frozen=True)
class TopH(TransformBase):
    """Top-H ("Top-H Decoding: Adapting the Creativity and Coherence with
    Bounded Entropy in Text Generation", NeurIPS 2025, arXiv 2509.02510), as transformers 5.x's
    ``TopHLogitsWarper`` computes it: among the 100 most probable tokens (renormalised), keep the
    leading ones while the cumulative entropy sum(-p log p) of those kept stays at most
    tau = h x H, H the entropy of that top-100 distribution; the most probable token is always kept.
    Ties at the 100th place are broken as ``torch.topk`` breaks them."""

    h: float
    top_n: int = 100

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        n = min(self.top_n, logits.shape[-1])
        head, idx = torch.topk(logits, n, dim=-1, largest=True, sorted=True)
        dist = torch.distributions.Categorical(logits=head)
        probs = dist.probs
        entropy = dist.entropy()
        tau = entropy * self.h
        running = torch.cumsum(-probs * torch.log(probs), dim=-1)  # NaN past a -inf logit: not kept
        keep_sorted = running <= tau[..., None]
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(1, idx, keep_sorted)
        last = idx.gather(1, keep_sorted.sum(-1, keepdim=True) - 1)  # the kept tokens lead the ranking
        cut_prob = logits.softmax(-1).gather(1, last)[..., 0]  # on the whole distribution received
        decision = {"h": self.h, "entropy": entropy, "tau": tau, "rank": keep.sum(-1), "cut_prob": cut_prob}
        return logits.masked_fill(~keep, NEG_INF), decision


@stage("p_less", params={"switch": "p_less"}, truncates=True, on={"p_less": True})
@dataclass(frozen=True)
class PLess(TransformBase):
    """p-less sampling ("p-less Sampling: A Robust Hyperparameter-Free Approach for
    LLM Decoding", arXiv 2509.23234, ICLR 2026): keep the tokens whose probability is at least
    L = sum_i p_i^2, the collision probability of the distribution received (the chance that two
    independent draws agree). No parameter.

    Ties and tokens kept, the paper's rule: a token exactly at L is kept (p >= L), and no minimum count
    is set because none is needed: L <= max p (sum p_i^2 <= max p x sum p_i), so the most probable token
    (with its ties) always passes. Float rounding can put L a hair above max p when one token holds
    nearly all the mass; the most probable token is then kept as the bound says it must be.
    The request's p_less is its switch, not a setting."""

    @classmethod
    def from_settings(cls, settings: dict[str, Any], generator: torch.Generator | None = None,
                      lm: LanguageModel | None = None) -> "PLess":
        return cls()


    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.float().softmax(dim=-1)
        threshold = probs.square().sum(-1, keepdim=True)
        remove = _keep_top(probs < threshold, logits)
        decision = {"threshold": threshold[..., 0], "rank": (~remove & torch.isfinite(logits)).sum(-1)}
        return logits.masked_fill(remove, NEG_INF), decision
