"""The Trace: what one decoding run really did, and its JSON form.

This is the contract between layers. Strategies fill it in, charts and the UI
read it, the CLI prints it. Probabilities are stored rounded to ``DIGITS``
significant digits so that the JSON stays small and byte-stable across runs.
Strategy-specific sections (``beam``, ``rounds``, contrastive fields of a
candidate) are plain JSON-ready dicts built by the strategy that owns them.
Two ride in ``extra`` when a request asks for them: ``loops`` (the loops of the
text: start, period, repeats, length, found_at, ids, text; strategies/loops.py)
and ``watch`` (the watched tokens ``[{id, text}]``; each step's ``watch`` holds
their ``raw_prob``, ``raw_rank``, ``prob``, ``rank``; strategies/watch.py).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

DIGITS = 6
# The finish_reason of a trace announced before the run's tokens, when the engine is asked to announce
# (``engine.stream(..., announce=True)``): no tokens, and either the prompt's token count
# (``extra["prompt_tokens"]``: the prompt is about to be read) or a one-off set-up step of seconds the
# strategy is about to take (``extra["setup"]``: what it does, in words for a status line).
READING_REASON = "reading"


def rnd(x: SupportsFloat) -> float:
    """Round to DIGITS significant digits; keep -inf / nan JSON-safe as None."""
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return None  # type: ignore[return-value]
    return float(f"{x:.{DIGITS}g}")


@dataclass
class Candidate:
    """One token considered at a step.

    raw_prob: the model's own distribution (softmax of the raw logits).
    prob: after the whole transform chain (what the selector drew from).
    kept: whether the token survived every truncation.
    extra: strategy-specific fields (contrastive scores, Gumbel noise, ...).
    """

    id: int
    text: str
    raw_prob: float
    prob: float
    kept: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"id": self.id, "text": self.text, "raw_prob": rnd(self.raw_prob),
             "prob": rnd(self.prob), "kept": self.kept}
        d.update(self.extra)
        return d


@dataclass
class Stage:
    """One stage of the chain at one step, over the step's candidates (in candidate order).

    probs: the distribution after the stage (what the next stage receives).
    kept: whether each candidate still has a finite logit after the stage: the decoder's own
        flag, which float underflow of ``probs`` to 0 does not change.
    kept_count: how many tokens of the whole vocabulary still have a finite logit.
    decision: what the stage decided on the distribution it received (the previous stage's
        ``probs``), JSON-ready; its fields per stage are listed in strategies/transforms.py.
        Absent for "raw" and for stages that record none.
    truncates: the stage is one that removes tokens (its registration says so: strategies/stages.py),
        whether or not it removed any at this step; written only when true. Charts and warnings read
        it here.
    """

    name: str
    probs: list[float]
    kept: list[bool]
    kept_count: int
    decision: dict[str, Any] = field(default_factory=dict)
    truncates: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "probs": [rnd(p) for p in self.probs], "kept": self.kept,
             "kept_count": self.kept_count}
        if self.decision:
            d["decision"] = self.decision
        if self.truncates:
            d["truncates"] = True
        return d


@dataclass
class Step:
    position: int
    chosen: int
    candidates: list[Candidate]
    stages: list[Stage] = field(default_factory=list)
    entropy: float = 0.0  # of the final distribution, in nats
    raw_entropy: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"position": self.position, "chosen": self.chosen,
             "entropy": rnd(self.entropy), "raw_entropy": rnd(self.raw_entropy),
             "candidates": [c.to_dict() for c in self.candidates]}
        if self.stages:
            d["stages"] = [s.to_dict() for s in self.stages]
        d.update(self.extra)
        return d


@dataclass
class Token:
    id: int
    text: str
    logprob: float  # under the distribution the token was drawn from
    raw_logprob: float  # under the model's own distribution

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "logprob": rnd(self.logprob),
                "raw_logprob": rnd(self.raw_logprob)}


@dataclass
class Timing:
    seconds: float = 0.0
    tokens_per_second: float = 0.0
    target_forward_passes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"seconds": round(self.seconds, 4),
             "tokens_per_second": round(self.tokens_per_second, 3),
             "target_forward_passes": self.target_forward_passes}
        d.update(self.extra)
        return d


@dataclass
class Trace:
    model: str
    strategy: str
    params: dict[str, Any]
    seed: int
    prompt: str
    prompt_ids: list[int]
    chain: list[str] = field(default_factory=list)
    text: str = ""
    tokens: list[Token] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    timing: Timing = field(default_factory=Timing)
    finish_reason: str = ""  # "eos", "length", "stopped", "loop" (loop_stop), ...
    beam: dict[str, Any] | None = None
    rounds: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def token_ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    def to_dict(self, timing: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "model": self.model, "strategy": self.strategy, "params": self.params,
            "seed": self.seed, "prompt": self.prompt, "prompt_ids": self.prompt_ids,
            "chain": self.chain, "text": self.text, "finish_reason": self.finish_reason,
            "tokens": [t.to_dict() for t in self.tokens],
            "steps": [s.to_dict() for s in self.steps],
        }
        if timing:
            d["timing"] = self.timing.to_dict()
        if self.beam is not None:
            d["beam"] = self.beam
        if self.rounds is not None:
            d["rounds"] = self.rounds
        d.update(self.extra)
        return d

    def to_json(self, timing: bool = True, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(timing=timing), indent=indent, ensure_ascii=False)
