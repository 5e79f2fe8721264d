"""The wall-clock reference of a speculative run: plain decoding of the same tokens, on the same
prompt and chain, in the same request (``measure_baseline``), after the run's text. Speculative
decoding and its EAGLE rounds both time themselves against it.

It runs on its own stopwatch with the run's clock held, so it counts neither in the run's timing nor
against its time budget; a run the budget cut gets it too (the engine throws OutOfTime in at the
run's last yield, and the strategy measures then). Where there is none, ``timing.speculative``
says why in ``no_baseline``: one of the sentences below.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from playground.trace import rnd
from strategies.context import DecodeContext, Stopwatch
from strategies.sampling.chain import Multinomial
from strategies.sampling.sampling import chain_loop

OFF = "plain decoding was not measured (measure_baseline is off)"
NO_TOKENS = "plain decoding was not timed: the run made no tokens"
STOPPED = "plain decoding was not timed: the run was stopped before its end"
GRAMMAR_LIMIT = "plain decoding was not timed: the grammar's parser reached a limit mid-run"
MEASURING = "measuring the plain baseline (plain decoding of the run's tokens, for the speed-up)"


def plain_decode(ctx: DecodeContext, tokens: list[int], chain: list) -> dict[str, Any]:
    """The plain sampling loop itself (``chain_loop``, EOS ignored) over exactly the run's ``tokens``
    (each step takes the run's token, as a forced step does: the same passes and chain on the same
    text), on the same prompt and chain: the wall-clock reference. Seconds in all, for the prompt, and
    per step; ``same_tokens``: whether the loop wrote the run's tokens.

    The loop runs the prompt once (its logits give the first token), then one pass per further
    token: n - 1 passes after the prefill, so a step costs (seconds - prefill) / (n - 1). It reads
    its own stopwatch while the run's clock is held.
    """
    n_tokens = len(tokens)
    plain = dataclasses.replace(ctx, max_new_tokens=n_tokens, forced=dict(enumerate(tokens)), clock=Stopwatch())
    trace = plain.new_trace("sampling", {})
    with ctx.clock.held():
        for trace in chain_loop(plain, trace, chain, Multinomial(ctx.generator(2)), stop_at_eos=False):
            pass
    seconds, prefill = trace.timing.seconds, trace.timing.extra["prefill_seconds"]
    return {"tokens": n_tokens, "seconds": rnd(seconds), "prefill_seconds": rnd(prefill),
            "step_seconds": rnd((seconds - prefill) / (n_tokens - 1)) if n_tokens > 1 else None,
            "tokens_per_second": rnd(n_tokens / seconds) if seconds else None,
            "same_tokens": trace.token_ids == list(tokens)}


def reference(ctx: DecodeContext, measure: bool, tokens: list[int], chain: list
              ) -> tuple[dict[str, Any] | None, str | None]:
    """(The plain-decoding reference of ``tokens``, None) or (None, why there is none)."""
    if not measure:
        return None, OFF
    if not tokens:
        return None, NO_TOKENS
    ctx.report(0.0, MEASURING)  # after the last token, seconds more: the page's status line says so
    return plain_decode(ctx, tokens, chain), None
