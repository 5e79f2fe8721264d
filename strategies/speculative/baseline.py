"""The wall-clock reference of a speculative run: plain decoding of the same length, on the same
prompt and chain, in the same request (``measure_baseline``). Speculative decoding and its EAGLE
rounds both time themselves against it.
"""
from __future__ import annotations

import dataclasses

from playground.trace import rnd
from strategies.context import DecodeContext
from strategies.sampling.chain import Multinomial
from strategies.sampling.sampling import chain_loop


def plain_decode(ctx: DecodeContext, n_tokens: int, chain: list) -> dict[str, float | None]:
    """The plain sampling loop itself (``chain_loop``, EOS ignored) for exactly ``n_tokens`` on the
    same prompt and chain: the wall-clock reference. Seconds in all, for the prompt, and per step.

    The loop runs the prompt once (its logits give the first token), then one pass per further
    token: n - 1 passes after the prefill, so a step costs (seconds - prefill) / (n - 1).
    """
    plain = dataclasses.replace(ctx, max_new_tokens=n_tokens)
    trace = plain.new_trace("sampling", {})
    for trace in chain_loop(plain, trace, chain, Multinomial(ctx.generator(2)), stop_at_eos=False):
        pass
    seconds, prefill = trace.timing.seconds, trace.timing.extra["prefill_seconds"]
    return {"tokens": n_tokens, "seconds": rnd(seconds), "prefill_seconds": rnd(prefill),
            "step_seconds": rnd((seconds - prefill) / (n_tokens - 1)) if n_tokens > 1 else None,
            "tokens_per_second": rnd(n_tokens / seconds) if seconds else None}
