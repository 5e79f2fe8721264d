"""Greedy, sampling through the transform chain, and the Gumbel-max selector.

One KV-cached loop serves all three: the model runs once on the prompt, then
once per new token; after every token the trace is yielded so the caller can
stream it and stop between steps. All three can watch their tokens for loops
(strategies/loops.py: recorded in the trace's ``loops``, and with ``loop_stop``
the run ends at the first one) and follow a watch-list (strategies/watch.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from playground.seam import ModelOutput
from playground.trace import Trace
from strategies.context import DecodeContext
from strategies.forcing import annotate, choose
from strategies.lens import lens_record
from strategies.loops import LOOP_REASON, LoopDetector, LoopStopParams, loop_detector
from strategies.phases import ANSWER, Clock, PhaseParams, Plan, note_step, plan
from strategies.recording import finish, make_step
from strategies.registry import Draws, register
from strategies.sampling.chain import Greedy, GumbelMax, Multinomial, accept_chosen, record_chain
from strategies.sampling.grammar import DEAD_END_REASON, GRAMMAR_REASON, grammar_of, grammar_stage, with_grammar
from strategies.sampling.samplers import SamplerParams, build_sampler_chain, plain_reference
from strategies.sampling.transforms import Temperature
from strategies.watch import WatchParams, watch_heading, watch_ids


@dataclass
class Watchers:
    """What a run watches besides the chain: a loop detector (None: off) and whether a loop ends the run;
    the watch-list's token ids ([w], None: off)."""

    loops: LoopDetector | None = None
    stop_at_loop: bool = False
    watch: torch.Tensor | None = None

    def see(self, trace: Trace, token_id: int, decode: Callable[[list[int]], str]) -> bool:
        """Feed the step's token to the loop detector and write the loops into the trace; True when a loop
        was found at this step and it ends the run."""
        if self.loops is None:
            return False
        found = self.loops.add(token_id)
        if found is not None or self.loops.running is not None:
            trace.extra["loops"] = [loop.to_dict(decode) for loop in self.loops.loops]
        return found is not None and self.stop_at_loop


def watchers(ctx: DecodeContext, params: LoopStopParams | WatchParams, trace: Trace) -> Watchers:
    """The run's Watchers from its params; the trace gets ``loops`` (empty so far) when loops are watched
    for, and ``watch`` (the watched tokens) when a watch-list is given."""
    out = Watchers()
    if isinstance(params, LoopStopParams):
        out.loops, out.stop_at_loop = loop_detector(params), params.loop_stop
        if out.loops is not None:
            trace.extra["loops"] = []
    if isinstance(params, WatchParams) and params.watch:
        ids = watch_ids(ctx.lm, params.watch)
        trace.extra["watch"] = watch_heading(ctx.lm, ids)
        out.watch = torch.tensor(ids, device=ctx.lm.device)
    return out


@dataclass
class Phased:
    """A run in two phases (strategies/phases.py): its plan and the answer's chain (None: the thinking's)."""

    plan: Plan
    answer: list | None = None

    def start(self, trace: Trace) -> Clock:
        trace.extra["phases"] = self.plan.record(None if self.answer is None else [t.name for t in self.answer])
        return Clock(self.plan)


def phased(ctx: DecodeContext, params: PhaseParams, build: Callable[[PhaseParams], list] | None = None
           ) -> Phased | None:
    """The phases of a run of ``params`` (None: none); ``build`` makes the answer's chain from its Params."""
    found = plan(ctx.lm, params)
    if found is None:
        return None
    return Phased(found, build(found.answer) if build is not None and found.answer is not None else None)


def chain_loop(ctx: DecodeContext, trace: Trace, chain: list, selector, stop_at_eos: bool = True,
               watch: Watchers | None = None, phases: Phased | None = None) -> Iterator[Trace]:
    """The per-step loop: chain the last logits, select (or take a forced token), record, feed it back.

    ``stop_at_eos=False`` decodes exactly ``max_new_tokens`` (a timing reference of a fixed length).
    ``watch``: loops looked for after every token (a loop that ends the run: finish reason "loop", at the
    step where it was found) and a watch-list recorded at every step.
    With a grammar stage in the chain, the run ends when the text is whole and the grammar allows
    nothing more ("grammar complete"), or when it allows no token at all ("grammar: no token allowed").
    ``phases``: each step runs its phase's chain, and the thinking budget forces the marker.
    """
    lm = ctx.lm
    grammar = grammar_of(chain)
    started = ctx.clock.now()
    context = torch.tensor([ctx.prompt_ids], device=lm.device)
    out = lm.forward(context, hidden=0 in ctx.lens, last=True)
    trace.timing.extra["prefill_seconds"] = round(ctx.clock.now() - started, 4)
    passes, reason = 1, "length"
    watch = watch or Watchers()
    clock = phases.start(trace) if phases is not None else None
    for i in range(ctx.max_new_tokens):
        active = phases.answer if phases is not None and clock is not None and clock.phase == ANSWER \
            and phases.answer else chain
        record = record_chain(active, out.logits[:, -1], context)
        if grammar is not None and grammar.dead(record.decisions[active.index(grammar)]):
            reason = DEAD_END_REASON
            break
        cut = clock.next_forced() if clock is not None else None
        token_id, noise, forced = choose(ctx.forced if cut is None else {**ctx.forced, i: cut}, i,
                                         lambda: selector.select(record.logits[-1]),
                                         getattr(selector, "generator", None))
        # every stage hears the token the text got, and whether it was forced, before the step is recorded
        accept_chosen(active, record, torch.tensor([token_id], device=record.logits[-1].device), bool(forced))
        stages, decisions = record.row(0)
        step, token = make_step(lm, len(ctx.prompt_ids) + i, stages, [t.name for t in active], token_id,
                                ctx.top_n, None if noise is None else noise[0], decisions, watch.watch)
        annotate(step, forced, lm)
        if clock is not None:
            note_step(trace.extra["phases"], step.extra, clock, clock.add(token_id, lm.piece(token_id)), i,
                      cut is not None, stages[0], token_id)
        trace.steps.append(step)
        trace.tokens.append(token)
        if i in ctx.lens:
            read_layers(ctx, trace, out, token_id)
        if stop_at_eos and token_id in lm.eos_ids:
            reason = "eos"
            finish(trace, ctx, started, reason, passes)
            yield trace
            return
        if grammar is not None and grammar.stopped():
            reason = GRAMMAR_REASON
            break
        if watch.see(trace, token_id, lm.decode):
            reason = LOOP_REASON
            break
        finish(trace, ctx, started, "running", passes)
        yield trace
        if i + 1 == ctx.max_new_tokens:
            break
        new = torch.tensor([[token_id]], device=lm.device)
        context = torch.cat([context, new], dim=1)
        out = lm.forward(new, out.cache, hidden=i + 1 in ctx.lens)
        passes += 1
    finish(trace, ctx, started, reason, passes)
    yield trace


def read_layers(ctx: DecodeContext, trace: Trace, out: ModelOutput, token_id: int) -> None:
    """The logit lens of the step just recorded, from the hidden states its own forward returned (no second
    pass): added to the trace's ``lens``, off the decoder's clock (reading, not decoding)."""
    with ctx.clock.held():
        step = len(trace.tokens) - 1
        if out.hidden_states is None:  # a model that gives none: nothing to read
            return
        record = lens_record(ctx.lm.layer_logits(out.hidden_states, last=out.logits[0, -1]), token_id, ctx.lm.piece,
                             spend=True)
        trace.extra.setdefault("lens", []).append({"step": step, "position": len(ctx.prompt_ids) + step,
                                                   "model": trace.model, **record})


def answer_chain(ctx: DecodeContext, chain: list, generator: torch.Generator) -> Callable[[PhaseParams], list]:
    """How the answer's chain is built from its Params: its own stages, the run's grammar stage (one
    grammar follows the whole text) where its order puts it."""
    def build(p: PhaseParams) -> list:
        assert isinstance(p, SamplerParams)
        return with_grammar(build_sampler_chain(p, generator, ctx.lm), grammar_of(chain), p.order)
    return build


@dataclass(frozen=True)
class GreedyParams(PhaseParams, LoopStopParams, WatchParams):
    """Greedy always takes the argmax; its knobs watch the run (loops, one of which may end it, and a
    watch-list) and split it in phases (a thinking budget)."""


@register("greedy", GreedyParams, "Take the most probable token at every step.", forceable=True,
          draws=Draws(reference=lambda p: [Temperature(0.0)], selector=lambda g: Greedy()))
def greedy(ctx: DecodeContext, params: GreedyParams) -> Iterator[Trace]:
    chain = with_grammar([], grammar_stage(ctx))
    trace = ctx.new_trace("greedy", params.to_dict(), [t.name for t in chain] + ["greedy"])
    yield from chain_loop(ctx, trace, chain, Greedy(), watch=watchers(ctx, params, trace),
                          phases=phased(ctx, params))


@register("sampling", SamplerParams,
          "The sampler chain (penalties, DRY, temperature, top-k, top-p, min-p, typical, epsilon, eta, top-nσ, "
          "XTC, mirostat...) in a chosen order, then a multinomial draw.", forceable=True,
          draws=Draws(reference=plain_reference, selector=Multinomial))
def sampling(ctx: DecodeContext, params: SamplerParams) -> Iterator[Trace]:
    generator = ctx.generator()
    chain = with_grammar(build_sampler_chain(params, generator, ctx.lm), grammar_stage(ctx), params.order)
    trace = ctx.new_trace("sampling", params.to_dict(), [t.name for t in chain] + ["multinomial"])
    yield from chain_loop(ctx, trace, chain, Multinomial(generator), watch=watchers(ctx, params, trace),
                          phases=phased(ctx, params, answer_chain(ctx, chain, generator)))


@register("gumbel", SamplerParams,
          "The same chain, then the Gumbel-max trick: argmax(logits + Gumbel noise); the noise is traced.",
          forceable=True, draws=Draws(reference=plain_reference, selector=GumbelMax))
def gumbel(ctx: DecodeContext, params: SamplerParams) -> Iterator[Trace]:
    generator = ctx.generator()
    chain = with_grammar(build_sampler_chain(params, generator, ctx.lm), grammar_stage(ctx), params.order)
    trace = ctx.new_trace("gumbel", params.to_dict(), [t.name for t in chain] + ["gumbel"])
    yield from chain_loop(ctx, trace, chain, GumbelMax(generator), watch=watchers(ctx, params, trace),
                          phases=phased(ctx, params, answer_chain(ctx, chain, generator)))
