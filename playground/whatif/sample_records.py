"""N samples with what each step saw recorded (step_record.py): the input of the answer rules and the sweep.

Seeds s, s + 1, ..., s + n - 1, as sample many draws them: greedy, sampling and gumbel with the plain
five stages go as sample many's batched rows (``draw_batched`` with ``record``); every other strategy
runs once per seed through the engine, and its records are read from the trace (the tokens'
log-probabilities, the steps' entropies, the candidates' raw probabilities: the trace keeps its top
``TOP_LOGPROBS`` candidates per step, so the top log-probabilities are those the run saw).

The records are the decoder's own: nothing here runs the model again to score a sample.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

from playground.engine import Request, prepare, run
from playground.errors import InvalidRequest
from playground.models import ModelStore, Progress
from playground.trace import Trace
from playground.whatif.sample_many import BATCHED, check_size, draw_batched, reference_chain
from playground.whatif.step_record import TOP_LOGPROBS, Drawn, StepRecord, drawn_of

Stop = Callable[[], bool]


@dataclass
class Draw:
    """The samples of one request, and how they were drawn."""

    samples: list[Drawn]
    batched: bool
    strategy: str
    params: dict[str, Any]
    model: str
    tokens: int


def draw_records(store: ModelStore, req: Request, n: int, progress: Progress | None = None,
                 stop: Stop | None = None) -> Draw:
    """``n`` recorded samples of ``req`` (module docstring). ``stop`` is asked between runs of the
    one-by-one path; the samples drawn by then are returned."""
    progress = progress or (lambda f, m: None)
    n = check_size(n, req.max_new_tokens, req.seed)
    if req.forced:
        raise InvalidRequest("recorded samples take no forced tokens; put the prefix in the prompt instead")
    spec, params, ctx = prepare(store, req, progress)
    lm, seeds = ctx.lm, list(range(req.seed, req.seed + n))
    chain = reference_chain(spec.name, params)
    batched = spec.name in BATCHED and chain is not None and not getattr(params, "loop_stop", False)
    if batched:
        assert chain is not None
        drawn = draw_batched(lm, chain, spec.name, ctx.prompt_ids, seeds, ctx.max_new_tokens, progress,
                             ctx.grammar, getattr(params, "order", ""), record=True)
        samples = [drawn_of(s.seed, list(s.outcomes[0]), s.steps, lm.decode) for s in drawn]
    else:
        samples = []
        for i, seed in enumerate(seeds):
            if stop is not None and stop():
                break
            progress(i / n, f"run {i + 1} of {n}")
            run_params = dict(req.params) | ({"measure_baseline": False} if spec.name == "speculative" else {})
            trace = run(store, dataclasses.replace(req, seed=seed, params=run_params, top_n=TOP_LOGPROBS))
            samples.append(drawn_of(seed, trace.token_ids, records_of_trace(trace), lm.decode))
    return Draw(samples, batched, spec.name, params.to_dict(), lm.key, ctx.max_new_tokens)


def records_of_trace(trace: Trace) -> list[StepRecord]:
    """The step records of a traced run: each token's log-probabilities; where the trace has one step per
    token (the token-by-token decoders), its entropies and its candidates' largest raw log-probabilities,
    else zeros and no top list (a beam's or a speculative round's steps are not one per token)."""
    aligned = len(trace.steps) == len(trace.tokens)
    out = []
    for i, token in enumerate(trace.tokens):
        step = trace.steps[i] if aligned else None
        top = [] if step is None else sorted((math.log(c.raw_prob) if c.raw_prob > 0 else -math.inf
                                              for c in step.candidates), reverse=True)[:TOP_LOGPROBS]
        out.append(StepRecord(token.id, token.logprob, token.raw_logprob, step.entropy if step else 0.0,
                              step.raw_entropy if step else 0.0, top))
    return out
