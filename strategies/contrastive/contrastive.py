"""Contrastive decoding: the expert's log-probability minus lambda times the amateur's,
over the tokens the expert finds plausible (Li et al. 2022; the maths is in
``contrastive_scoring``, the amateurs in ``contrastive_amateurs``).

The run's model is the expert. Per step:

    expert forward (KV cache)  ->  amateur logits (own cache, premature layer, or short window)
    ->  contrastive scores, -inf outside V_head  ->  the chain (penalty, temperature, top-k,
    top-p, min-p on the scores)  ->  selector (greedy with expert tie-break, multinomial, gumbel)

Trace: the stages of each step are [expert logits ("raw"), masked scores ("contrastive"), then
one per chain transform], so the standard per-step charts apply: ``raw_prob`` is the expert's
probability, ``prob`` the softmax of the final scores, ``kept`` = plausible and not cut by the
chain. Each candidate also carries ``expert_logprob``, ``amateur_logprob``, ``score`` (expert -
lambda x amateur, shown for masked tokens too) and ``plausible``; each step carries
``expert_choice`` (what greedy on the expert alone picks) and ``alpha_threshold`` (the mask's
line as an expert log-probability). ``trace["contrastive"]`` names the pair and the knobs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from playground.trace import Step, Trace, rnd
from strategies.context import DecodeContext
from strategies.contrastive.amateurs import Amateur, make_amateur
from strategies.contrastive.scoring import ContrastiveScores, contrastive_scores, pick_greedy
from strategies.forcing import annotate, choose
from strategies.loops import LoopParams, record_loops
from strategies.params import param
from strategies.recording import finish, make_step
from strategies.registry import register
from strategies.sampling.chain import ChainParams, GumbelMax, Multinomial, build_chain, record_chain
from strategies.sampling.grammar import DEAD_END_REASON, GRAMMAR_REASON, Grammar, grammar_stage

SELECTORS = ("greedy", "multinomial", "gumbel")


@dataclass(frozen=True)
class ContrastiveParams(LoopParams, ChainParams):
    """The contrastive knobs; the inherited chain knobs act on the contrastive scores; loops are looked for
    on the finished text."""

    amateur: str = param("early_exit", "The amateur: 'early_exit' (a premature layer of the expert, "
                         "DoLa), 'window' (the expert seeing only the last tokens), or another model's key "
                         "with the same tokenizer (toy-small for toy; gpt2 for gpt2-large online).", brief="The weaker model contrasted: a premature layer, a short window, or another model.")
    amateur_layer: int = param(-1, "Early-exit amateur: the expert's layer read through its final norm and "
                               "LM head (0 = embeddings). -1 = 5/6 of the way up (15 of 18 on Gemma 3 270M).",
                               low=-1, high=1024, step=1, ui_max=48, when={"amateur": ("early_exit",)})
    amateur_window: int = param(8, "Window amateur: how many of the last tokens it sees.", low=1, high=4096,
                                step=1, ui_max=64, when={"amateur": ("window",)})
    alpha: float = param(0.1, "Plausibility: keep only tokens whose expert probability is at least alpha x "
                         "the expert's top probability. 0 = no mask; 1 = only the expert's top token.",
                         low=0.0, high=1.0, step=0.01, brief="Plausibility: keep tokens with expert probability ≥ alpha × the expert's top one.")
    strength: float = param(1.0, "lambda: score = expert logprob - lambda x amateur logprob. 0 = no contrast "
                            "(plain expert).", low=0.0, high=10.0, noop=0.0, step=0.05, ui_max=3.0)
    amateur_temperature: float = param(1.0, "tau: the amateur's logits are divided by tau before its "
                                       "log-softmax. 1 = off.", low=0.0, high=10.0, low_open=True, noop=1.0,
                                       step=0.05, ui_max=3.0)
    selector: str = param("greedy", "What picks from the (chained) scores: greedy (ties go to the expert's "
                          "favourite), multinomial or gumbel sampling.", choices=SELECTORS, brief="What picks from the contrastive scores: greedy, multinomial or gumbel.")

    def validate(self) -> None:
        super().validate()
        name = self.amateur.strip()
        if not name or any(c.isspace() for c in name):
            raise InvalidRequest(f"amateur must be early_exit, window or a model key, got {self.amateur!r}")
        object.__setattr__(self, "amateur", name)


def _selector(params: ContrastiveParams, ctx: DecodeContext) -> Any:
    if params.selector == "multinomial":
        return Multinomial(ctx.generator())
    if params.selector == "gumbel":
        return GumbelMax(ctx.generator())
    return None  # greedy: pick_greedy, with the expert tie-break


def _annotate(step: Step, cs: ContrastiveScores, expert_choice: int, lm: LanguageModel) -> None:
    """Add the contrastive fields to a recorded step (its candidates' ``extra`` and its own)."""
    ids = [c.id for c in step.candidates]
    idx = torch.tensor(ids, device=cs.scores.device)
    columns = zip(cs.expert_logprobs[0, idx].tolist(), cs.amateur_logprobs[0, idx].tolist(),
                  cs.scores[0, idx].tolist(), cs.plausible[0, idx].tolist())
    for cand, (e, a, s, ok) in zip(step.candidates, columns):
        cand.extra.update(expert_logprob=rnd(e), amateur_logprob=rnd(a), score=rnd(s), plausible=bool(ok))
    step.extra.update(expert_choice=expert_choice, expert_choice_text=lm.piece(expert_choice),
                      alpha_threshold=rnd(cs.threshold[0, 0]), plausible_count=int(cs.plausible[0].sum()))


def _decode_step(ctx: DecodeContext, params: ContrastiveParams, chain: list, selector: Any, out: Any,
                 amateur: Amateur, context: torch.Tensor, index: int, grammar: Grammar | None = None
                 ) -> tuple[int, Any, Any]:
    """Score, chain, select (or take the forced token of step ``index``) and record one token:
    (token id, Step, Token). A grammar masks the expert first, so the plausibility constraint and
    the scores are taken over the tokens it allows; the step is None when it allows none."""
    amateur_logits = amateur.next_logits(out, context)
    # A model amateur's head may be shorter (padding rows past the tokenizer): compare the common part.
    expert_logits = out.logits[:, -1, :amateur_logits.shape[-1]]
    first: list[tuple[str, torch.Tensor, dict[str, Any]]] = []
    scored_expert = expert_logits
    if grammar is not None:
        scored_expert, decision = grammar.decide(expert_logits, context)
        if grammar.dead(decision):
            return -1, None, None
        first = [("grammar", scored_expert[0], {k: (v[0] if isinstance(v, torch.Tensor) else v)
                                                for k, v in decision.items()})]
    cs = contrastive_scores(scored_expert, amateur_logits, params.alpha, params.strength,
                            params.amateur_temperature)
    record = record_chain(chain, cs.masked_scores, context)
    if selector is None:
        select = lambda: (pick_greedy(record.logits[-1], cs.expert_logprobs), None)  # noqa: E731
    else:
        select = lambda: selector.select(record.logits[-1])  # noqa: E731
    token_id, noise, forced = choose(ctx.forced, index, select, getattr(selector, "generator", None))
    if grammar is not None:
        grammar.advance([0], [token_id])
    names = [*(name for name, _, _ in first), "contrastive", *(t.name for t in chain)]
    scored, decisions = record.row(0)
    step, token = make_step(ctx.lm, context.shape[1], [expert_logits[0], *(x for _, x, _ in first), *scored], names,
                            token_id, ctx.top_n, None if noise is None else noise[0],
                            [*(d for _, _, d in first), {}, *decisions])
    _annotate(step, cs, int(expert_logits[0].argmax()), ctx.lm)
    annotate(step, forced, ctx.lm)
    return token_id, step, token


def _finish(trace: Trace, ctx: DecodeContext, amateur: Amateur, started: float, reason: str,
            passes: int, params: LoopParams | None = None) -> Trace:
    """Text, reason and timing; with ``params`` (the run's last trace), the loops of the text too."""
    if params is not None:
        record_loops(trace, params, ctx.lm.decode)
    finish(trace, ctx, started, reason, passes)
    trace.timing.extra.update(amateur_forward_passes=amateur.forward_passes,
                              amateur_tokens_processed=amateur.tokens_processed)
    return trace


@register("contrastive", ContrastiveParams,
          "Expert logprob minus lambda x amateur logprob over the expert's plausible tokens (Li et al. 2022); "
          "the amateur is a smaller model, an early layer (DoLa) or a short context window.",
          family="contrastive", forceable=True)
def contrastive(ctx: DecodeContext, params: ContrastiveParams) -> Iterator[Trace]:
    lm = ctx.lm
    amateur = make_amateur(lm, params.amateur, params.amateur_layer, params.amateur_window, ctx.load_model,
                           ctx.max_new_tokens, len(ctx.prompt_ids))
    chain = build_chain(params)
    selector = _selector(params, ctx)
    grammar = grammar_stage(ctx)  # always first here: it masks the expert before the scores
    trace = ctx.new_trace("contrastive", params.to_dict(),
                          [*(["grammar"] if grammar else []), "contrastive", *(t.name for t in chain), params.selector])
    trace.extra["contrastive"] = dict(expert=lm.key, amateur=amateur.name, alpha=params.alpha,
                                      strength=params.strength, amateur_temperature=params.amateur_temperature)
    started = ctx.clock.now()
    context = torch.tensor([ctx.prompt_ids], device=lm.device)
    out = lm.forward(context, hidden=amateur.needs_hidden)
    passes, reason = 1, "length"
    for i in range(ctx.max_new_tokens):
        token_id, step, token = _decode_step(ctx, params, chain, selector, out, amateur, context, i, grammar)
        if step is None:
            reason = DEAD_END_REASON
            break
        trace.steps.append(step)
        trace.tokens.append(token)
        if token_id in lm.eos_ids:
            yield _finish(trace, ctx, amateur, started, "eos", passes, params)
            return
        if grammar is not None and grammar.stopped():
            reason = GRAMMAR_REASON
            break
        if i + 1 == ctx.max_new_tokens:
            break
        yield _finish(trace, ctx, amateur, started, "running", passes)
        new = torch.tensor([[token_id]], device=lm.device)
        context = torch.cat([context, new], dim=1)
        out = lm.forward(new, out.cache, hidden=amateur.needs_hidden)
        passes += 1
    yield _finish(trace, ctx, amateur, started, reason, passes, params)
