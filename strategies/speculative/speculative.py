"""Speculative decoding you can watch: a draft proposes, the target verifies in one pass.

One round (Leviathan et al. 2022; Chen et al. 2023):

1. the draft proposes G tokens autoregressively (G = gamma, fixed or adaptive);
2. the target runs once on [last committed token, x_1 .. x_G] and gives its
   distribution at all G + 1 positions (causal attention makes that one pass);
3. both distributions go through the same transform chain, then
   ``strategies.speculative.verify`` keeps a prefix of the draft and adds one target token
   (resampled after a rejection, bonus when all passed);
4. the KV caches of target and draft are cropped back to the accepted text.

Invariant between rounds: the target's cache holds every committed token but
the last, which is fed at the head of the next verification pass. The trace is
yielded after every round; with ``measure_baseline`` plain target decoding of
the same tokens then runs in the same request, off the run's clock, as the wall-clock reference
(also when the time budget cut the run: see ``baseline``).

What the trace says about each token: ``rounds`` hold the decisions (each
draft's probabilities, acceptance and fate; the token the target added, the
distribution it was drawn from and the target's own probability of it); each
step's ``speculative`` field names its round and where the token came from
(``draft``, ``residual`` or ``target``), and the token's ``logprob`` is under
the distribution it was drawn from. A draft never runs past an end-of-text
token, and a token the verifier drew after the text ended is marked discarded,
never kept. Wall-clock figures (per-round seconds, the plain-decoding
reference, the draft cost c, the speedups) live under ``timing`` only.

A round's record and its tokens as trace steps are written in ``rounds``; the
plain-decoding reference runs in ``baseline``; the parameters are ``speculative_params``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, cast

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from playground.trace import Trace, rnd
from strategies.context import DecodeContext, OutOfTime
from strategies.loops import record_loops
from strategies.phases import ANSWER
from strategies.recording import finish
from strategies.registry import Draws, register
from strategies.sampling.chain import ChainRecord, build_chain, record_chain
from strategies.sampling.grammar import (
    DEAD_END_REASON,
    GRAMMAR_REASON,
    Grammar,
    GrammarLimit,
    grammar_of,
    grammar_stage,
    with_grammar,
)
from strategies.sampling.sampling import phased
from strategies.speculative.baseline import GRAMMAR_LIMIT, STOPPED
from strategies.speculative.baseline import reference as plain_reference
from strategies.speculative.drafts import Draft, crop, make_draft, rollback_cache
from strategies.speculative.eagle.rounds import eagle_rounds
from strategies.speculative.phase_rounds import capped_gamma, forced_step, note_round, thinking_end
from strategies.speculative.rounds import Round, Tally, commit_round, round_record
from strategies.speculative.speculative_params import MAX_GAMMA, SpeculativeParams
from strategies.speculative.speedup import expected_curve
from strategies.speculative.verify import Verdict, rejection, topk

# --- one round ---------------------------------------------------------------------------------


# (target_raw_probs [B, G + 1, V], target_probs [B, G + 1, V], draft_probs [B, G, V], draft_ids [B, G],
#  generator) -> Verdict; see strategies.speculative.verify for the shapes.
Verifier = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], Verdict]


def verifier(params: SpeculativeParams) -> Verifier:
    if params.verify == "topk":
        return lambda raw, t, d, ids, g: topk(t, d, ids, g, params.verify_top_k, raw)
    return lambda raw, t, d, ids, g: rejection(t, d, ids, g)


@dataclass
class SpeculativeDecoder:
    """Target, draft and the target's cache; ``step(gamma)`` runs one round and commits its tokens.

    ``ids`` is the prompt plus every committed token. The target's cache covers ``ids[:-1]``.
    ``clock`` reads the decoder's own time (``DecodeContext.clock.now``).
    """

    target: LanguageModel  # playground.models.LM
    draft: Draft
    chain: list
    verify: Verifier
    draft_generator: torch.Generator
    verify_generator: torch.Generator
    ids: list[int]
    clock: Callable[[], float]
    cache: Any = None
    target_passes: int = 0
    grammar: Grammar | None = None  # the target's grammar stage (in ``chain``); the draft drafts without it
    verify_kind: str = "rejection"

    def prefill(self) -> None:
        """Run the prompt (but its last token) through target and draft."""
        self.cache = rollback_cache(self.target)
        if len(self.ids) > 1:
            self.cache = self.target.forward(self._tensor(self.ids[:-1]), self.cache, last=True).cache
            self.target_passes += 1
        crop(self.cache, 0)
        self.draft.prefill(self.ids)

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], device=self.target.device)

    def step(self, gamma: int) -> Round:
        """Draft up to ``gamma`` tokens, verify them in one target pass, commit, roll the caches back."""
        t0 = self.clock()
        draft_chain = [t for t in self.chain if t is not self.grammar]
        proposal = self.draft.propose(self.ids, gamma, draft_chain, self.draft_generator, self.target.eos_ids)
        masks = None
        if self.grammar is not None:
            # The target is the constrained target. A drafted token the grammar forbids has target
            # probability 0, so rejection sampling rejects it for certain (and draws from the residual,
            # which needs the draft's distribution there): the draft is cut just after it, before the
            # target's pass. Top-K acceptance draws a miss from the target, so it is cut before it.
            along, whole = self.grammar.along(proposal.ids, self.target.vocab_size)
            forbidden = len(whole) - 1 if len(whole) <= len(proposal.ids) else None
            keep = len(proposal.ids) if forbidden is None else forbidden + (self.verify_kind == "rejection")
            along, whole = along[: keep + 1], whole[: keep + 1]
            proposal = dataclasses.replace(proposal, ids=proposal.ids[:keep], probs=proposal.probs[:keep])
            # after a forbidden token (rejected for certain) the target's distribution is never used
            full = torch.ones(keep + 1, along.shape[1], dtype=torch.bool)
            full[: along.shape[0]] = along
            masks = (full, whole + [False] * (keep + 1 - len(whole)))
        t1 = self.clock()
        records, target_probs = self._score(proposal.ids, masks)
        target_raw_probs = torch.cat([r.logits[0] for r in records]).softmax(-1)
        if masks is not None:  # top-K acceptance ranks only what the grammar allows
            target_raw_probs = target_raw_probs * masks[0].to(target_raw_probs.device)
        verdict = self.verify(target_raw_probs.unsqueeze(0), target_probs.unsqueeze(0),
                              proposal.probs.unsqueeze(0),
                              torch.tensor([proposal.ids], dtype=torch.long, device=target_probs.device),
                              self.verify_generator)
        n = int(verdict.n_accepted[0])
        committed = proposal.ids[:n] + [int(verdict.next_ids[0])]
        # The target saw ids + all G drafts; it must keep ids + the n accepted ones (the new token is
        # fed next round). The draft keeps at most the same prefix.
        crop(self.cache, len(proposal.ids) - n)
        self.draft.rollback(len(self.ids) + n)
        self.ids = self.ids + committed
        ends = self._feed_grammar(self.grammar, records, committed) if self.grammar is not None else None
        t2 = self.clock()
        return Round(proposal, records, target_probs, verdict, committed, t1 - t0, t2 - t1, ends)

    def force(self, token: int) -> ChainRecord:
        """Commit ``token`` with no draft (a thinking budget's forced token): one target pass over the last
        token gives the chain's record at its position, for the trace."""
        out = self.target.forward(self._tensor([self.ids[-1]]), self.cache)
        self.cache = out.cache
        self.target_passes += 1
        record = record_chain(self.chain, out.logits[:, 0], self._tensor(self.ids))
        self.ids = self.ids + [token]
        return record

    def trim(self, extra: int) -> None:
        """Take back the last ``extra`` committed tokens (a round that ran past the end of the thinking):
        the caches go back with them."""
        if extra > 0:
            self.ids = self.ids[:-extra]
            crop(self.cache, extra)
            self.draft.rollback(len(self.ids) - 1)

    def _feed_grammar(self, grammar: Grammar, records: list[ChainRecord], committed: list[int],
                      ) -> tuple[int, str] | None:
        """Advance the grammar along ``committed`` to where it ends the text, as the sampling loop does:
        before a token whose position it left dead, or with the end of text, or with a token after which
        it allows nothing more (``grammar``: this decoder's, in its chain). (How many tokens the text
        keeps, the finish reason), or None."""
        at = self.chain.index(grammar)
        for i, token in enumerate(committed):
            if grammar.dead(records[i].decisions[at]):
                return i, DEAD_END_REASON
            if token in self.target.eos_ids:
                return i + 1, "eos"
            grammar.advance([0], [token])
            if grammar.stopped():
                return i + 1, GRAMMAR_REASON
        return None

    def _score(self, drafted: list[int], masks: tuple[torch.Tensor, list[bool]] | None = None
               ) -> tuple[list[ChainRecord], torch.Tensor]:
        """One target pass over [last token, drafts]: per-position chain records and [G + 1, V] probs;
        under a grammar, ``masks`` (``Grammar.along``) is its mask at each position."""
        out = self.target.forward(self._tensor([self.ids[-1]] + drafted), self.cache)
        self.cache = out.cache
        self.target_passes += 1
        context = self._tensor(self.ids + drafted)
        n = len(self.ids)
        # Position i sees the text up to draft i, so the penalty stage gets that context.
        records = []
        for i in range(len(drafted) + 1):
            if self.grammar is not None and masks is not None:
                self.grammar.pinned = (masks[0][i], [masks[1][i]])
            try:
                records.append(record_chain(self.chain, out.logits[:, i], context[:, : n + i]))
            finally:
                if self.grammar is not None:
                    self.grammar.pinned = None
        target_probs = torch.cat([r.logits[-1] for r in records]).softmax(-1)
        return records, target_probs


# --- the wall-clock side ----------------------------------------------------------------------


def speed(summary: dict[str, Any], costs: dict[str, Any], seconds: float, produced: int,
          baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The wall-clock side: this run's seconds and per-round costs, and against the plain reference the
    measured speedup, the costs Leviathan's formula needs (c and verification cost, in plain target
    steps) and the speedup that formula expects at each gamma."""
    out: dict[str, Any] = {"seconds": rnd(seconds), **costs, "baseline": baseline, "measured_speedup": None,
                           "c": None, "verify_cost": None, "expected_speedup": None}
    step = baseline.get("step_seconds") if baseline else None
    if not baseline or not step:
        return out
    per_token = costs["draft_seconds_per_token"]
    verify = {int(k): rnd(v / step) for k, v in costs["verify_seconds"].items()}
    c = rnd(per_token / step) if per_token is not None else None
    measured = None
    if seconds and produced:
        base_seconds = baseline["seconds"]
        assert base_seconds is not None  # a baseline with a step time has its seconds
        measured = rnd(base_seconds / seconds)
    out.update(measured_speedup=measured, c=c, verify_cost={str(k): v for k, v in verify.items()})
    if summary["alpha"] is not None and c is not None:
        curve = expected_curve(summary["alpha"], c, verify, range(1, MAX_GAMMA + 1))
        out["expected_speedup"] = {k: [rnd(x) if isinstance(x, float) else x for x in v] for k, v in curve.items()}
    return out


# --- the strategy ------------------------------------------------------------------------------


def _next_gamma(gamma: int, proposed: int, accepted: int) -> int:
    """transformers' heuristic schedule: +2 after a fully accepted round, -1 after a rejection."""
    if proposed == 0:
        return gamma
    return min(MAX_GAMMA, gamma + 2) if accepted == proposed else max(1, gamma - 1)


@register("speculative", SpeculativeParams,
          "A draft proposes gamma tokens, the target verifies them in one pass: rejection sampling "
          "(lossless) or top-K (lossy). Drafts: a smaller model, early exit, prompt lookup, EAGLE.",
          family="speculative",
          # rejection sampling draws from the target's chain exactly (Leviathan et al. 2022, Chen et al. 2023)
          draws=Draws(reference=build_chain, reference_name="the target's chained distribution",
                      run_params={"measure_baseline": False}))
def speculative(ctx: DecodeContext, params: SpeculativeParams) -> Iterator[Trace]:
    lm = ctx.lm
    if params.phased() and (params.draft == "eagle" or ctx.grammar is not None):
        raise InvalidRequest("a thinking budget or an answer chain works in speculative decoding with the drafts "
                             "early_exit, prompt_lookup and a draft model, and without a grammar, got draft "
                             f"{params.draft!r}" + (" and a grammar" if ctx.grammar is not None else ""))
    if ctx.grammar is not None and params.draft == "eagle":
        raise InvalidRequest("a grammar works with the drafts early_exit, prompt_lookup and a draft model; "
                             "EAGLE's tree draft does not take one, got draft 'eagle'")
    chain = with_grammar(build_chain(params), grammar_stage(ctx), params.order)
    if params.draft == "eagle":
        trace = ctx.new_trace("speculative", params.to_dict(), [t.name for t in chain] + ["verify:tree"])
        trace.rounds = []
        trace.timing.extra["rounds"] = []
        yield from eagle_rounds(ctx, params, trace, chain, [t.name for t in chain])
        return
    draft = make_draft(lm, params.draft, params.draft_layer, params.lookup_ngram, ctx.load_model)
    trace = ctx.new_trace("speculative", params.to_dict(), [t.name for t in chain] + [f"verify:{params.verify}"])
    trace.rounds = []
    trace.timing.extra["rounds"] = []
    phases = phased(ctx, params, lambda p: build_chain(cast(SpeculativeParams, p)))
    clock = phases.start(trace) if phases is not None else None
    decoder = SpeculativeDecoder(lm, draft, chain, verifier(params), ctx.generator(1), ctx.generator(0),
                                 list(ctx.prompt_ids), ctx.clock.now, grammar=grammar_of(chain),
                                 verify_kind=params.verify)
    started = ctx.clock.now()
    with torch.inference_mode():
        decoder.prefill()
    tally, gamma, reason = Tally(), params.gamma, "length"

    def reference() -> None:
        """Plain decoding of the tokens the run made, off its clock, into the totals (or why there is none)."""
        plain_chain = [grammar_stage(ctx) if t is decoder.grammar else t for t in chain]  # a fresh matcher
        baseline, why = plain_reference(ctx, params.measure_baseline, trace.token_ids, plain_chain)
        _totals(trace, decoder, draft, tally, baseline, trace.timing.seconds, why)

    try:
        while len(trace.tokens) < ctx.max_new_tokens:
            if phases is not None and clock is not None:
                decoder.chain = phases.answer if clock.phase == ANSWER and phases.answer else chain
                cut = clock.next_forced()
                if cut is not None:  # the thinking budget is spent: its marker, one token with no draft
                    with torch.inference_mode():
                        forced_step(ctx, trace, decoder, clock, cut, [t.name for t in decoder.chain])
                    finish(trace, ctx, started, "running", decoder.target_passes)
                    if cut in lm.eos_ids:
                        reason = "eos"
                        break
                    yield trace
                    continue
            names = [t.name for t in decoder.chain]
            # Never draft past the token budget (the round adds up to g + 1 tokens), nor the thinking's
            g = capped_gamma(clock, min(gamma, ctx.max_new_tokens - len(trace.tokens) - 1))
            with torch.inference_mode():
                r = decoder.step(g)
            if r.ends is not None and r.ends[0] == 0:  # the grammar left the text nowhere to go
                reason = r.ends[1]
                break
            start = len(trace.tokens)
            switch = thinking_end(clock, r.committed, lm.piece) if clock is not None else None
            if switch is not None and switch < len(r.committed):  # the answer starts inside the round
                decoder.trim(len(r.committed) - switch)
                r = dataclasses.replace(r, ends=(switch, ""))
            committed, ended = commit_round(ctx, trace, r, names)
            trace.rounds.append(round_record(lm, len(trace.rounds), start, r, committed, params))
            if switch is not None and switch < len(r.committed):
                trace.rounds[-1].update(ended=False, phase_switch=True)
            if clock is not None:
                note_round(trace, clock, start, lm.piece)
            trace.timing.extra["rounds"].append({"draft": rnd(r.draft_seconds), "verify": rnd(r.verify_seconds)})
            tally.add(r, committed)
            if params.adaptive_gamma:
                gamma = _next_gamma(gamma, len(r.proposal.ids), int(r.verdict.n_accepted[0]))
            finish(trace, ctx, started, "running", decoder.target_passes)
            _totals(trace, decoder, draft, tally, None, trace.timing.seconds)
            if ended:
                reason = ended
                break
            yield trace
    except OutOfTime:  # the time budget cut the run after its last round: the reference still runs
        reference()
        yield trace
        return
    except GeneratorExit:  # Stop: the page keeps this trace as it is
        _totals(trace, decoder, draft, tally, None, trace.timing.seconds, STOPPED)
        raise
    except GrammarLimit:
        _totals(trace, decoder, draft, tally, None, trace.timing.seconds, GRAMMAR_LIMIT)
        raise
    record_loops(trace, params, lm.decode)
    finish(trace, ctx, started, reason, decoder.target_passes)
    reference()
    yield trace


def _totals(trace: Trace, decoder: SpeculativeDecoder, draft: Draft, tally: Tally,
            baseline: dict[str, Any] | None, seconds: float, no_baseline: str | None = None) -> None:
    """The run's counts in trace.extra["speculative"], its wall-clock figures in trace.timing (with
    ``no_baseline``, why the plain reference is missing)."""
    summary = tally.summary()
    trace.timing.extra["draft_forward_passes"] = draft.forward_passes
    trace.timing.extra["speculative"] = speed(summary, tally.seconds(), seconds, len(trace.tokens), baseline)
    if no_baseline:
        trace.timing.extra["speculative"]["no_baseline"] = no_baseline
    trace.extra["speculative"] = {
        "draft": draft.name, "draft_kind": draft.kind, "verify": trace.params["verify"],
        "target_forward_passes": decoder.target_passes, "draft_forward_passes": draft.forward_passes,
        "verify_passes": tally.rounds, **summary}
