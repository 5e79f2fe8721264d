"""Sample, then beam: sampled prefixes for diversity, beam search for the rest.

The course notes' hybrid: sample the first n tokens through the engine's
transform chain (penalty, temperature, top-k, top-p, min-p, then a
multinomial draw), then beam search each sampled prefix to the end. Several
prefixes give several trees; the winner is the best finished hypothesis over
all trees.

Scores are the model's own log-probabilities of the whole continuation,
prefix included, and lengths count the prefix's tokens, so hypotheses of
different trees compare on one scale (calling transformers' beam search on
prompt + prefix would count neither). The prefixes are drawn as one batch
from one seeded generator.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from playground.trace import Step, Trace, rnd
from strategies.beam import (BeamParams, BeamSearch, BeamStart, StepRecord, beam_section_extra, best_path_steps,
                             finished_records, publish)
from strategies.beam_tree import BeamTree
from strategies.chain import ChainParams, Multinomial, build_chain, run_chain
from strategies.context import DecodeContext
from strategies.params import param
from strategies.recording import finish, make_step
from strategies.registry import register


@dataclass(frozen=True)
class SampleBeamParams(BeamParams, ChainParams):
    """The chain's knobs for the prefix, the beam's for the rest."""

    prefix_tokens: int = param(2, "Tokens sampled through the chain before beam search takes over. "
                               "0 = plain beam search.", low=0, high=64, noop=0, step=1, ui_max=16)
    num_prefixes: int = param(3, "Sampled prefixes, each beam-searched into a tree of its own. 1 = one tree.",
                              low=1, high=8, noop=1, step=1)

    def validate(self) -> None:
        ChainParams.validate(self)
        BeamParams.validate(self)

    def chain_params(self) -> ChainParams:
        return ChainParams(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ChainParams)})


@dataclass
class Prefix:
    """One sampled prefix: its tokens, their model log-probability, its last node."""

    ids: list[int] = field(default_factory=list)
    score: float = 0.0
    node: int | None = None
    steps: list[Step] = field(default_factory=list)
    ended: bool = False  # sampled an EOS


@torch.inference_mode()
def sample_prefixes(ctx: DecodeContext, chain: list, length: int, count: int, tree: BeamTree,
                    search: BeamSearch) -> list[Prefix]:
    """Draw ``count`` prefixes of ``length`` tokens as one batch; each becomes a chain of
    ``sampled`` nodes (tree index = prefix index) in ``tree``."""
    prefixes = [Prefix() for _ in range(count)]
    if length == 0:
        return prefixes
    lm, names = ctx.lm, [t.name for t in chain]
    selector = Multinomial(ctx.generator())
    out = lm.forward(torch.tensor([ctx.prompt_ids], device=lm.device))
    search.counters.forward_passes += 1
    cache = out.cache
    cache.reorder_cache(torch.zeros(count, dtype=torch.long, device=lm.device))  # one cache row per prefix
    logits = out.logits[:, -1].expand(count, -1)  # [count, vocab]
    context = torch.tensor([ctx.prompt_ids] * count, device=lm.device)
    for i in range(length):
        stages = run_chain(chain, logits, context)
        chosen, _ = selector.select(stages[-1])  # [count]
        raw_logprobs = logits.log_softmax(-1)
        for row, pre in enumerate(prefixes):
            if not pre.ended:
                _extend(ctx, tree, pre, row, i, [st[row] for st in stages], names, int(chosen[row]),
                        float(raw_logprobs[row, chosen[row]]))
        if i + 1 < length and not all(p.ended for p in prefixes):
            context = torch.cat([context, chosen[:, None]], dim=1)
            logits = lm.forward(chosen[:, None], cache).logits[:, -1]
            search.counters.forward_passes += 1
    return prefixes


def _extend(ctx: DecodeContext, tree: BeamTree, pre: Prefix, row: int, i: int, stages: list[torch.Tensor],
            names: list[str], token_id: int, raw_logprob: float) -> None:
    step, token = make_step(ctx.lm, len(ctx.prompt_ids) + i, stages, names, token_id, ctx.top_n)
    pre.score += raw_logprob
    pre.node = tree.add(pre.node, i, token_id, raw_logprob, pre.score, "sampled", "sampled through the chain",
                        None, 0, row, drawn_logprob=token.logprob)
    pre.ids.append(token_id)
    pre.steps.append(step)
    pre.ended = token_id in ctx.lm.eos_ids


@register("sample_beam", SampleBeamParams,
          "Sample the first n tokens through the chain, then beam search the rest; several prefixes make "
          "several trees.", family="beam")
def sample_beam(ctx: DecodeContext, params: SampleBeamParams) -> Iterator[Trace]:
    lm = ctx.lm
    started = ctx.clock.now()
    chain = build_chain(params.chain_params())
    trace = ctx.new_trace("sample_beam", params.to_dict(), [t.name for t in chain] + ["multinomial", "beam"])
    tree = BeamTree(lm.piece, "sample_beam")
    search = BeamSearch(lm, params, tree, ctx.max_new_tokens, ctx.top_n)
    length = min(params.prefix_tokens, ctx.max_new_tokens)
    prefixes = sample_prefixes(ctx, chain, length, params.num_prefixes if length else 1, tree, search)
    extra: dict[str, Any] = beam_section_extra(params)
    extra["prefix_tokens"] = length
    finished: list[tuple[float, float, int]] = []
    records: dict[int, tuple[int, list[StepRecord]]] = {}
    for i, pre in enumerate(prefixes):
        if pre.ended or length == ctx.max_new_tokens:
            finished.append(_prefix_as_hypothesis(tree, pre, params.length_penalty, ctx.max_new_tokens))
            continue
        run = search.run(BeamStart(list(ctx.prompt_ids) + pre.ids, pre.score, pre.node, length, i))
        for current in run:
            publish(trace, lm, tree, current, [], search.counters.to_dict(tree), **extra)
            finish(trace, ctx, started, "running", search.counters.forward_passes)
            yield trace
        records[i] = (length, run.records)
        finished.extend(run.finished.items)
    finished.sort(key=lambda h: -h[0])  # stable: earlier trees first on ties
    best = finished[0][2]
    extra["trees"] = [_tree_summary(tree, i, pre, finished) for i, pre in enumerate(prefixes)]
    publish(trace, lm, tree, best, finished_records(lm, tree, finished), search.counters.to_dict(tree), **extra)
    winner = prefixes[tree.nodes[best]["tree"]]
    trace.steps = winner.steps + best_path_steps(lm, tree, records, best, len(ctx.prompt_ids))
    reason = "eos" if trace.tokens and trace.tokens[-1].id in lm.eos_ids else "length"
    finish(trace, ctx, started, reason, search.counters.forward_passes)
    yield trace


def _prefix_as_hypothesis(tree: BeamTree, pre: Prefix, length_penalty: float,
                          max_total: int) -> tuple[float, float, int]:
    """A prefix that already ended (EOS, or the whole budget) is a finished hypothesis by itself."""
    assert pre.node is not None
    tree.set_status(pre.node, "finished", "eos (sampled)" if pre.ended else "max_length (sampled)")
    penalised = float(torch.tensor(pre.score, dtype=torch.float32) / (len(pre.ids) ** length_penalty))
    tree.nodes[pre.node]["penalised"] = rnd(penalised)
    return penalised, pre.score, pre.node


def _tree_summary(tree: BeamTree, index: int, pre: Prefix, finished: list[tuple[float, float, int]],
                  ) -> dict[str, Any]:
    own = [h for h in finished if tree.nodes[h[2]]["tree"] == index]
    return {"tree": index, "prefix": pre.ids, "prefix_text": "".join(tree.piece(t) for t in pre.ids),
            "prefix_score": rnd(pre.score), "best_node": own[0][2] if own else None,
            "best_penalised": rnd(own[0][0]) if own else None}
