"""The processing chain: transforms in a stated order, then a selector.

Default order (the order transformers applies them in ``generate``):

    penalty -> temperature -> top_k -> top_p -> min_p -> selector

The order matters: top_p after temperature sees the sharpened or flattened
distribution; min_p after top_k measures from the same top token but sees
fewer candidates. A transform at its no-op value drops out of the chain.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from playground.errors import InvalidRequest
from strategies.params import Params, param
from strategies.transforms import MinP, RepetitionPenalty, Temperature, TopK, TopP, Transform

STAGE_NAMES = ("penalty", "temperature", "top_k", "top_p", "min_p")
DEFAULT_ORDER = ",".join(STAGE_NAMES)


@dataclass(frozen=True)
class ChainParams(Params):
    """Knobs of the transform chain, shared by every strategy that samples."""

    temperature: float = param(1.0, "Divide logits by T before softmax. 0 = greedy (argmax only); 1 = no-op.",
                               low=0.0, high=100.0, noop=1.0, step=0.05, ui_max=3.0)
    top_k: int = param(0, "Keep the k most probable tokens. 0 = off.", low=0, high=1_000_000, noop=0,
                       step=1, ui_max=200)
    top_p: float = param(1.0, "Nucleus: keep the smallest set of top tokens whose mass reaches p. 1 = off.",
                         low=0.0, high=1.0, low_open=True, noop=1.0, step=0.01)
    min_p: float = param(0.0, "Drop tokens below min_p x the top token's probability. 0 = off.",
                         low=0.0, high=1.0, noop=0.0, step=0.01)
    repetition_penalty: float = param(1.0, "Divide positive / multiply negative logits of tokens already "
                                      "in the text. 1 = off.", low=0.0, high=10.0, low_open=True, noop=1.0,
                                      step=0.05, ui_max=3.0)
    order: str = param(DEFAULT_ORDER, "Order of the chain's stages, comma-separated.")

    def validate(self) -> None:
        names = [n.strip() for n in self.order.split(",") if n.strip()]
        if sorted(names) != sorted(STAGE_NAMES):
            raise InvalidRequest(
                f"order must list each of {', '.join(STAGE_NAMES)} once, got {self.order!r}")
        object.__setattr__(self, "order", ",".join(names))


def build_chain(p: ChainParams) -> list[Transform]:
    """The transforms of ``p`` in its order, no-ops left out."""
    make = {
        "penalty": lambda: RepetitionPenalty(p.repetition_penalty) if p.repetition_penalty != 1.0 else None,
        "temperature": lambda: Temperature(p.temperature) if p.temperature != 1.0 else None,
        "top_k": lambda: TopK(p.top_k) if p.top_k > 0 else None,
        "top_p": lambda: TopP(p.top_p) if p.top_p < 1.0 else None,
        "min_p": lambda: MinP(p.min_p) if p.min_p > 0.0 else None,
    }
    chain = [make[name]() for name in p.order.split(",")]
    return [t for t in chain if t is not None]


def run_chain(chain: list[Transform], logits: torch.Tensor, context: torch.Tensor) -> list[torch.Tensor]:
    """Logits after each stage: ``[raw, after chain[0], ..., after chain[-1]]``."""
    stages = [logits]
    for t in chain:
        stages.append(t.apply(stages[-1], context))
    return stages


def apply_chain(chain: list[Transform], logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    for t in chain:
        logits = t.apply(logits, context)
    return logits


# --- selectors: the last link of every chain -------------------------------------------------


class Greedy:
    name = "greedy"

    def select(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[batch, vocab] -> ([batch] ids, no noise)."""
        return logits.argmax(dim=-1), None


@dataclass
class Multinomial:
    """Draw from softmax(logits) with an explicit generator."""

    generator: torch.Generator
    name = "multinomial"

    def select(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        probs = logits.float().softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1), None


@dataclass
class GumbelMax:
    """The Gumbel-max trick: argmax(logits + g), g = -log(-log(U)), U ~ Uniform(0, 1).

    The argmax is distributed as Categorical(softmax(logits)) with no softmax
    and no CDF search (Gumbel 1954; Kool et al. 2019). Returns the noise so
    the trace can show it.
    """

    generator: torch.Generator
    name = "gumbel"

    def select(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        u = torch.rand(logits.shape, generator=self.generator, device=logits.device, dtype=torch.float64)
        noise = (-torch.log(-torch.log(u))).to(logits.dtype)
        return (logits + noise).argmax(dim=-1), noise


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) along the last axis; -inf logits count as 0."""
    logp = logits.float().log_softmax(dim=-1)
    p = logp.exp()
    return -(p * logp.nan_to_num(neginf=0.0)).sum(-1)

