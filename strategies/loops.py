"""Loops in the generated tokens: a span written several times back to back, found as it forms.

Penalties forbid forms (a token, an n-gram), not behaviours; a loop is a behaviour, so it is watched
for on the tokens themselves (vLLM's ``repetition_detection`` ends a run the same way).

What counts, with ``repeats`` = k >= 2 and ``min_span`` = n >= 1 (only the tokens fed in count: the
decoders feed the generated tokens, never the prompt):

- A loop of period p is a span s of p >= n tokens that is primitive (not itself a shorter span written
  several times) and that the tokens hold k times back to back: ``tokens[a : a + k·p] == s * k``.
- It is found at the step where its k-th copy ends, the first step at which it is whole: at step t
  (the index of the token just fed), the periods p = n, n + 1, ..., (t + 1) // k are tried shortest
  first, and the first whose last k·p tokens are k copies of a primitive span makes a loop with
  ``start`` = t + 1 - k·p and ``found_at`` = t. A span that is not primitive is skipped, so with
  n >= 2 a run of one token never counts (with n = 1 its shorter period is found first anyway).
- A loop that keeps going extends its record instead of adding new ones: while each new token equals
  the token p before it, its ``length`` (tokens from ``start`` on that keep the period, at least k·p)
  grows, and ``repeats`` is ``length // p``, its whole copies. Meanwhile no other loop is looked for.
  The first token that breaks the period ends it; from that token on the detector looks again. A new
  loop's window holds the breaking token and may reach back over the old loop: with k = 2,
  ``1 1 2 1 1 2`` records the stutter ``1`` (steps 0-1), ``1`` again (steps 3-4), then ``1 1 2`` from
  step 0, found at step 5. ``loops`` lists them in the order found.
- ``find_loops`` feeds a finished token list through the same detector: the loops a run would have
  recorded step by step.

The cost per step is small: while a loop runs, one comparison; otherwise one comparison per period
tried, more only where the tokens really repeat.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from playground.trace import Trace
from strategies.params import Params, param

LOOP_REASON = "loop"  # finish reason: loop_stop ended the run at a loop (its record is the trace's last loop)


@dataclass
class Loop:
    """One loop: ``ids`` (the span, p tokens) written from step ``start`` on; found at step ``found_at``
    (its k-th copy ended there); ``length`` tokens from ``start`` keep the period so far."""

    start: int
    ids: tuple[int, ...]
    found_at: int
    length: int

    @property
    def period(self) -> int:
        return len(self.ids)

    @property
    def repeats(self) -> int:
        """Whole copies of the span so far."""
        return self.length // self.period

    def to_dict(self, decode: Callable[[list[int]], str]) -> dict[str, Any]:
        """JSON-ready, with the span's text (``decode``: token ids -> text)."""
        return {"start": self.start, "period": self.period, "repeats": self.repeats, "length": self.length,
                "found_at": self.found_at, "ids": list(self.ids), "text": decode(list(self.ids))}


def is_primitive(span: list[int]) -> bool:
    """Whether ``span`` is not a shorter span written several times (``[1, 2, 1, 2]`` is not)."""
    p = len(span)
    return not any(p % d == 0 and span[d:] == span[:-d] for d in range(1, p // 2 + 1))


class LoopDetector:
    """Feed tokens one at a time (``add``); ``loops`` holds every loop found, in the order found (module
    docstring)."""

    def __init__(self, repeats: int, min_span: int = 1) -> None:
        if repeats < 2 or min_span < 1:
            raise ValueError(f"a loop needs repeats >= 2 and min_span >= 1, got {repeats} and {min_span}")
        self.repeats, self.min_span = repeats, min_span
        self.tokens: list[int] = []
        self.loops: list[Loop] = []
        self.running: Loop | None = None  # the last loop, while its period holds

    def add(self, token_id: int) -> Loop | None:
        """Feed the next token; return the loop found at this step (None when none was, including while a
        loop that was found earlier goes on: that one's record grows)."""
        self.tokens.append(int(token_id))
        t = len(self.tokens) - 1
        if self.running is not None:
            if self.tokens[t] == self.tokens[t - self.running.period]:
                self.running.length += 1
                return None
            self.running = None
        loop = self.find_at(t)
        if loop is not None:
            self.loops.append(loop)
            self.running = loop
        return loop

    def find_at(self, t: int) -> Loop | None:
        """The loop whose k-th copy ends at step ``t``, shortest period first (None: none)."""
        k, tokens = self.repeats, self.tokens
        for p in range(self.min_span, (t + 1) // k + 1):
            if all(tokens[t - i] == tokens[t - i - p] for i in range((k - 1) * p)):
                span = tokens[t + 1 - p:t + 1]
                if is_primitive(span):
                    return Loop(start=t + 1 - k * p, ids=tuple(span), found_at=t, length=k * p)
        return None


def find_loops(token_ids: Iterable[int], repeats: int, min_span: int = 1) -> list[Loop]:
    """The loops of a finished token list: those a run would have recorded step by step."""
    detector = LoopDetector(repeats, min_span)
    for token_id in token_ids:
        detector.add(token_id)
    return detector.loops


@dataclass(frozen=True)
class LoopParams(Params):
    """The loop detector's knobs (module docstring): a decoder that has them records the loops of its text."""

    loop_repeats: int = param(0, "Loop detection: a span of tokens written this many times back to back is a "
                              "loop, recorded in the trace (its start, period, repeats and tokens). Below 2 = off.",
                              low=0, high=100, noop=0, step=1, ui_max=10, brief="Loop detection: a span written this many times back to back is a loop.")
    loop_min_span: int = param(1, "Loop detection: the shortest span that counts, in tokens (1 counts one token "
                               "repeated; 2 and more let a run of one token pass).", low=1, high=1000, step=1,
                               ui_max=20, brief="Loop detection: the shortest repeated span that counts, in tokens.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loop_repeats < 2:  # one off value, the no-op (a span written once is no loop)
            object.__setattr__(self, "loop_repeats", 0)


@dataclass(frozen=True)
class LoopStopParams(LoopParams):
    """The loop knobs of a decoder that looks for loops as it goes, and can end the run at one."""

    loop_stop: bool = param(False, "Loop detection: end the run as soon as a loop is found (finish reason "
                            "'loop'); it acts only with loop_repeats on. Off = off.", noop=False)


def loop_detector(p: LoopParams) -> LoopDetector | None:
    """The detector ``p`` asks for, or None when detection is off."""
    return LoopDetector(p.loop_repeats, p.loop_min_span) if p.loop_repeats else None


def record_loops(trace: Trace, p: LoopParams, decode: Callable[[list[int]], str]) -> None:
    """The loops of the trace's tokens, written into its ``loops`` when ``p`` asks for detection: for a
    decoder that looks at its finished text only (beam's best path, speculative, contrastive)."""
    if p.loop_repeats:
        found = find_loops(trace.token_ids, p.loop_repeats, p.loop_min_span)
        trace.extra["loops"] = [loop.to_dict(decode) for loop in found]
