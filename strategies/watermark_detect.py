"""Detecting the green-list watermark in a token id sequence (Kirchenbauer et al. 2023, "A Watermark
for Large Language Models", arXiv:2301.10226, section 2: the one-proportion z-test).

Each scored token is green or not by the list the watermark drew for it (strategies/green_lists.py:
lefthash, the list seeded by the token before it; selfhash, its own list). Without a watermark a
token is green with probability gamma, so with T tokens scored and G green,

    z = (G - gamma T) / sqrt(T gamma (1 - gamma)),    p = P(N(0, 1) > z) = erfc(z / sqrt 2) / 2.

A watermarked text has many more green tokens than gamma T: z of 4 or more on a few hundred tokens
(the paper's threshold) is a p-value below 3e-5.

``detect`` follows transformers' ``WatermarkDetector`` with its defaults (context width 1, every
occurrence counted; ``ignore_repeated_ngrams`` counts each distinct (previous, token) pair, or each
distinct token for selfhash, once): transformers' detector on ``ids`` gives the same counts, z and
p-value as ``detect`` on ``ids`` less a leading BOS token (which transformers drops), bit for bit.
With ``context`` > 0 the first ``context`` ids (a prompt) are not scored; the last of them seeds the
first scored token's list under lefthash, as it did when the text was generated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from playground.errors import InvalidRequest
from strategies.green_lists import DEFAULT_KEY, is_green


@dataclass(frozen=True)
class Mark:
    """One token of the sequence: ``green`` is None for a token not scored (context, or lefthash's
    first token, which has no token before it); ``counted`` is False for a repeat that
    ``ignore_repeated_ngrams`` left out of the counts."""

    index: int
    token_id: int
    green: bool | None
    counted: bool


@dataclass(frozen=True)
class Detection:
    gamma: float
    scored: int  # T: tokens counted
    green: int  # G: green tokens among them
    z: float
    p_value: float
    marks: list[Mark] = field(default_factory=list)

    @property
    def green_fraction(self) -> float:
        return self.green / self.scored

    def to_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "scored": self.scored, "green": self.green,
                "green_fraction": self.green_fraction, "z": self.z, "p_value": self.p_value,
                "marks": [{"index": m.index, "id": m.token_id, "green": m.green, "counted": m.counted}
                          for m in self.marks]}


def z_score(green: int, scored: int, gamma: float) -> float:
    """(G - gamma T) / sqrt(T gamma (1 - gamma)), in the order of operations transformers uses."""
    return (float(green) - gamma * float(scored)) / math.sqrt(float(scored) * gamma * (1 - gamma))


def p_value(z: float) -> float:
    """The one-sided p-value P(N(0, 1) > z) = erfc(z / sqrt 2) / 2 (torch's erfc, as transformers)."""
    return 0.5 * float(torch.special.erfc(torch.tensor(z / math.sqrt(2), dtype=torch.float64)))


def detect(ids: Sequence[int], vocab_size: int, gamma: float, key: int = DEFAULT_KEY, scheme: str = "lefthash",
           context: int = 0, ignore_repeated_ngrams: bool = False) -> Detection:
    """Mark and count the green tokens of ``ids`` after the first ``context`` ones; see the module docstring."""
    ids = [int(i) for i in ids]
    first = max(context, 0 if scheme == "selfhash" else 1)
    marks = [Mark(i, t, None, False) for i, t in enumerate(ids[:first])]
    seen: set[tuple[int, ...]] = set()
    green = scored = 0
    for i in range(first, len(ids)):
        prev = None if scheme == "selfhash" else ids[i - 1]
        hit = is_green(prev, ids[i], vocab_size, gamma, key, scheme)
        gram = (ids[i],) if prev is None else (prev, ids[i])
        counted = not (ignore_repeated_ngrams and gram in seen)
        seen.add(gram)
        marks.append(Mark(i, ids[i], hit, counted))
        if counted:
            scored += 1
            green += hit
    if scored == 0:
        raise InvalidRequest(f"text must hold at least one token to score after the context "
                             f"({'the token before it seeds its green list' if scheme != 'selfhash' else 'none'}), "
                             f"got {len(ids) - context} token(s)")
    z = z_score(green, scored, gamma)
    return Detection(gamma, scored, green, z, p_value(z), marks)
