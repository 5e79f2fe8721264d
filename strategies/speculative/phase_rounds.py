"""Speculative decoding in two phases (strategies/phases.py): which chain a round verifies under, how far a
round may run, and the budget's forced tokens.

- A round verifies under the chain of the phase it starts in (the draft drafts under it too). A round that
  commits the marker is cut just after it: the tokens it drew beyond were verified under the thinking's
  chain, so they are taken back (marked discarded, as after an end of text), and the next round starts in
  the answer. Cutting a round at a point its own prefix decides keeps rejection sampling lossless: each
  kept token was drawn exactly from its phase's chain.
- Under a thinking budget, gamma is capped so that a round commits at most the thinking tokens left: the
  budget counts committed tokens, never drafts. When none are left, the marker (after the budget message)
  is committed one token a round with no draft, each step recording the target's own view of it.
"""
from __future__ import annotations

from typing import Any

import torch

from playground.trace import Trace
from strategies.context import DecodeContext
from strategies.phases import ANSWER, THINKING, Clock, note_step
from strategies.recording import make_step

NOT_FORCED = torch.empty(0)


def capped_gamma(clock: Clock | None, gamma: int) -> int:
    """``gamma`` cut so a round (its accepted drafts and the target's token) never runs past the budget."""
    if clock is None or clock.phase != THINKING or clock.plan.budget < 0:
        return gamma
    return max(0, min(gamma, clock.plan.budget - clock.thinking - 1))


def thinking_end(clock: Clock, committed: list[int], piece: Any) -> int | None:
    """How many of a round's tokens reach the end of the thinking (the marker's last token included), or
    None when the round stays in one phase."""
    if clock.phase != THINKING:
        return None
    probe = clock.copy()
    for i, token in enumerate(committed):
        probe.add(token, piece(token))
        if probe.phase == ANSWER:
            return i + 1
    return None


def note_round(trace: Trace, clock: Clock, start: int, piece: Any) -> None:
    """Each step the round appended (from ``start``): its phase, into the records."""
    for i in range(start, len(trace.tokens)):
        token = trace.tokens[i].id
        note_step(trace.extra["phases"], trace.steps[i].extra, clock, clock.add(token, piece(token)), i, False,
                  NOT_FORCED, token)


def forced_step(ctx: DecodeContext, trace: Trace, decoder: Any, clock: Clock, token: int, names: list[str]) -> None:
    """Commit the budget's next forced token with no draft (``SpeculativeDecoder.force``) as a step of its own."""
    record = decoder.force(token)
    stages, decisions = record.row(0)
    step, tok = make_step(ctx.lm, len(ctx.prompt_ids) + len(trace.tokens), stages, names, token, ctx.top_n,
                          decisions=decisions)
    i = len(trace.tokens)
    trace.steps.append(step)
    trace.tokens.append(tok)
    note_step(trace.extra["phases"], step.extra, clock, clock.add(token, ctx.lm.piece(token)), i, True, stages[0],
              token)
