"""The processing chain: transforms in a stated order, then a selector.

Default order (the order transformers applies them in ``generate``):

    penalty -> temperature -> top_k -> top_p -> min_p -> selector

The order matters: top_p after temperature sees the sharpened or flattened
distribution; min_p after top_k measures from the same top token but sees
fewer candidates. A transform at its no-op value drops out of the chain.
``record_chain`` keeps, beside the logits after each stage, the decision each
stage made on the logits it received (strategies/sampling/transforms.py lists them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from playground.errors import InvalidRequest
from strategies.params import Params, param
from strategies.stages import STAGES, Decision, Outcome, TransformBase, declare

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
    order: str = param(DEFAULT_ORDER, "Order of the chain's stages, comma-separated.", brief="The stages' order: transformers, llama.cpp, or stage names comma-separated.")

    def validate(self) -> None:
        names = [n.strip() for n in self.order.split(",") if n.strip()]
        if sorted(n for n in names if n != "grammar") != sorted(STAGE_NAMES) or names.count("grammar") > 1:
            raise InvalidRequest(f"order must list each of {', '.join(STAGE_NAMES)} once (and grammar at most "
                                 f"once, where a grammar goes: first when it is not named), got {self.order!r}")
        object.__setattr__(self, "order", ",".join(names))


declare(ChainParams)


def build_chain(p: ChainParams) -> list[TransformBase]:
    """The transforms of ``p`` in its order, no-ops left out (strategies/stages.py: a stage is on when
    a parameter of it is away from its no-op value)."""
    return [STAGES[name].build(p) for name in p.order.split(",")
            if name in STAGE_NAMES and STAGES[name].is_on(p)]


@dataclass
class ChainRecord:
    """One pass through the chain: ``logits`` are ``[raw, after chain[0], ...]``, each [batch, vocab];
    ``decisions[i]`` is what ``chain[i]`` decided on ``logits[i]`` (per row, see transforms.py)."""

    logits: list[torch.Tensor]
    decisions: list[Decision]

    def row(self, r: int) -> tuple[list[torch.Tensor], list[Decision]]:
        """Row ``r``: [vocab] logits per stage, and each decision with its tensors indexed at ``r``."""
        return [x[r] for x in self.logits], [{k: _at(v, r) for k, v in d.items()} for d in self.decisions]


def _at(value: Any, r: int) -> Any:
    return value[r] if isinstance(value, torch.Tensor) else value


def record_chain(chain: list[TransformBase], logits: torch.Tensor, context: torch.Tensor) -> ChainRecord:
    """Run the chain, keeping the logits after each stage and each stage's decision."""
    record = ChainRecord([logits], [])
    for t in chain:
        out, decision = t.decide(record.logits[-1], context)
        record.logits.append(out)
        record.decisions.append(decision)
    return record


def run_chain(chain: list[TransformBase], logits: torch.Tensor, context: torch.Tensor) -> list[torch.Tensor]:
    """Logits after each stage: ``[raw, after chain[0], ..., after chain[-1]]``."""
    return record_chain(chain, logits, context).logits


def apply_chain(chain: list[TransformBase], logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    for t in chain:
        logits = t.apply(logits, context)
    return logits


def accept_chosen(chain: list[TransformBase], record: ChainRecord, chosen: torch.Tensor, forced: bool) -> None:
    """Tell every stage which tokens were chosen ([batch] ids) and whether they were forced; what a
    stage learned (``accept``) joins its decision in ``record`` (a new dict: the decision it returned is
    left as it was). A forced token teaches nothing: the stateful stages record the step and keep their
    state (XTC takes its coin back), as if the token had been in the prompt."""
    for i, t in enumerate(chain):
        learned = t.accept(Outcome(record.logits[i], record.logits[i + 1], record.decisions[i], chosen, forced))
        if learned:
            record.decisions[i] = {**record.decisions[i], **learned}


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

    The uniforms are drawn in float64 where the device has it, so that -log(-log(U)) keeps both
    tails. Apple's MPS has no float64: there they are float32, and the noise spans about
    [-2.8, 16.6], outside which a Gumbel(0, 1) puts about 2e-7 of its mass.
    """

    generator: torch.Generator
    name = "gumbel"

    def select(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        dtype = torch.float64 if has_float64(logits.device) else torch.float32
        u = torch.rand(logits.shape, generator=self.generator, device=logits.device, dtype=dtype)
        noise = (-torch.log(-torch.log(u))).to(logits.dtype)
        return (logits + noise).argmax(dim=-1), noise


def has_float64(device: torch.device) -> bool:
    """Whether ``device`` computes in float64 (Apple's MPS does not)."""
    return torch.device(device).type != "mps"
