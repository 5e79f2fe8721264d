"""What a decoder recorded about one sample, step by step: the inputs of the answer rules and the sweep.

Per generated token (``StepRecord``):

- ``id``: the token;
- ``logprob``: its log-probability under the distribution it was drawn from (after the chain);
- ``raw_logprob``: its log-probability under the model's own distribution (before any transform);
- ``entropy``, ``raw_entropy``: the entropy in nats of those two distributions at that step;
- ``top_raw_logprobs``: the model's ``TOP_LOGPROBS`` largest log-probabilities at that step, largest
  first (fewer where the vocabulary is smaller). DeepConf's token confidence (the mean negative of the
  top k) and CoT-decoding's margin (top-1 minus top-2 probability) are read from these.

A sample (``Drawn``) holds its seed, token ids, text, and ``ends``: the length of the text decoded from
its first i + 1 tokens, so that a character span of the text (an extracted answer) maps back to the
tokens that wrote it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

TOP_LOGPROBS = 20  # DeepConf reads the top 20 log-probabilities of each step (vLLM's logprobs=20)


@dataclass
class StepRecord:
    id: int
    logprob: float
    raw_logprob: float
    entropy: float
    raw_entropy: float
    top_raw_logprobs: list[float]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "logprob": finite(self.logprob), "raw_logprob": finite(self.raw_logprob),
                "entropy": self.entropy, "raw_entropy": self.raw_entropy,
                "top_raw_logprobs": [finite(x) for x in self.top_raw_logprobs]}


@dataclass
class Drawn:
    """One sample with its steps' records (module docstring)."""

    seed: int
    ids: list[int]
    text: str
    ends: list[int]
    steps: list[StepRecord] = field(default_factory=list)

    def tokens_of_span(self, start: int, end: int) -> list[int]:
        """The indices of the tokens whose characters overlap ``[start, end)`` of the text."""
        out, begin = [], 0
        for i, stop in enumerate(self.ends):
            if stop > start and begin < end and stop > begin:
                out.append(i)
            begin = max(begin, stop)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "ids": list(self.ids), "text": self.text, "ends": list(self.ends),
                "steps": [s.to_dict() for s in self.steps]}


def drawn_from_dict(d: dict[str, Any]) -> Drawn:
    """A sample back from its ``to_dict`` (a sweep point's kept samples): None log-probabilities are -inf."""
    def back(x: float | None) -> float:
        return -math.inf if x is None else float(x)

    steps = [StepRecord(int(st["id"]), back(st["logprob"]), back(st["raw_logprob"]), float(st["entropy"]),
                        float(st["raw_entropy"]), [back(x) for x in st["top_raw_logprobs"]]) for st in d["steps"]]
    return Drawn(int(d["seed"]), [int(i) for i in d["ids"]], str(d["text"]), [int(e) for e in d["ends"]], steps)


def finite(x: float) -> float | None:
    """``x``, or None where it is not a finite number (JSON has no -inf)."""
    return x if math.isfinite(x) else None


def drawn_of(seed: int, ids: list[int], steps: list[StepRecord], decode: Callable[[list[int]], str]) -> Drawn:
    """A sample's record, its text and the character ends of its tokens read through ``decode``."""
    return Drawn(seed, list(ids), decode(list(ids)), [len(decode(list(ids[:i + 1]))) for i in range(len(ids))],
                 steps)
