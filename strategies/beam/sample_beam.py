"""Sample, then beam: sampled prefixes for diversity, beam search for the rest.

The course notes' hybrid: sample the first n tokens through the engine's
transform chain (penalty, temperature, top-k, top-p, min-p), then beam search
each sampled prefix to the end. Several prefixes give several trees; the
winner is the best finished hypothesis over all trees.

The prefixes are drawn without replacement, so no two trees are the same:
Gumbel-top-k over prefixes (Kool et al. 2019, stochastic beam search with
beam size = the number of prefixes) under the distribution the chain gives
each token. The first prefix (largest perturbed score) is an exact sample of
that distribution; when fewer distinct prefixes than asked have mass (T = 0,
top_k = 1, ...), fewer are drawn and the trace says so. A prefix that samples
EOS ends there and is a finished hypothesis by itself.

Scores are the model's own log-probabilities of the whole continuation,
prefix included, and lengths count the prefix's tokens, so hypotheses of
different trees compare on one scale (calling transformers' beam search on
prompt + prefix would count neither).

Phases (strategies/phases.py) run in the beam part, each hypothesis with its own
clock from the text of its prefix: a thinking budget must leave the prefix whole
(thinking_budget >= prefix_tokens), and answer_params are refused (the chain
samples the prefix only).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from playground.errors import InvalidRequest
from playground.trace import Step, Trace, rnd
from strategies.beam.beam import BeamParams, BeamSearch, BeamStart
from strategies.beam.beam_trace import (
    StepRecord,
    beam_section_extra,
    best_path_steps,
    end_reason,
    finished_records,
    note_phases,
    publish,
)
from strategies.beam.stochastic_beam import SELECTOR, cpu_generator, gumbel_top_k, largest_children, perturb_children
from strategies.beam.tree import BeamTree
from strategies.context import DecodeContext
from strategies.loops import record_loops
from strategies.params import param
from strategies.phases import plan
from strategies.recording import finish, make_step
from strategies.registry import register
from strategies.sampling.chain import ChainParams, build_chain, record_chain
from strategies.sampling.grammar import grammar_of, grammar_stage, with_grammar
from strategies.stages import TransformBase


@dataclass(frozen=True)
class SampleBeamParams(BeamParams, ChainParams):
    """The chain's knobs for the prefix, the beam's for the rest."""

    prefix_tokens: int = param(2, "Tokens sampled through the chain before beam search takes over. "
                               "0 = plain beam search.", low=0, high=64, noop=0, step=1, ui_max=16)
    num_prefixes: int = param(3, "Distinct prefixes drawn without replacement (Gumbel-top-k over prefixes), each "
                              "beam-searched into a tree of its own. 1 = one tree.", low=1, high=8, noop=1, step=1, brief="Distinct prefixes drawn (Gumbel-top-k), each beam-searched on its own.")

    def validate(self) -> None:
        ChainParams.validate(self)
        BeamParams.validate(self)
        if self.answer_params.strip():
            raise InvalidRequest("answer_params: sample_beam's chain samples only the prefix, and the beam after "
                                 "it has no chain to change in the answer")
        if 0 <= self.thinking_budget < self.prefix_tokens:
            raise InvalidRequest(f"thinking_budget {self.thinking_budget} would cut the sampled prefix "
                                 f"(prefix_tokens {self.prefix_tokens}): sample_beam's budget acts in the beam "
                                 f"part only; use a budget of at least prefix_tokens, or fewer prefix tokens")

    def chain_params(self) -> ChainParams:
        return ChainParams(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ChainParams)})


@dataclass
class Prefix:
    """A sampled prefix: its tokens, the model's and the chain's log-probabilities, its perturbed score."""

    ids: list[int] = field(default_factory=list)
    raw_logprobs: list[float] = field(default_factory=list)  # the model's, per token
    drawn_logprobs: list[float] = field(default_factory=list)  # the chain's (what it was drawn from), per token
    steps: list[Step] = field(default_factory=list)
    g: float = 0.0  # perturbed score (Gumbel-top-k); 0 at the root
    row: int = 0  # cache row of its parent while it is being drawn
    node: int | None = None  # its last node in the tree, once placed
    ended: bool = False  # sampled an EOS

    @property
    def score(self) -> float:
        return sum(self.raw_logprobs)

    @property
    def phi(self) -> float:
        return sum(self.drawn_logprobs)

    def child(self, token_id: int, raw_logprob: float, drawn_logprob: float, g: float, row: int, step: Step,
              ended: bool) -> "Prefix":
        return Prefix(self.ids + [token_id], self.raw_logprobs + [raw_logprob], self.drawn_logprobs + [drawn_logprob],
                      self.steps + [step], g, row, None, ended)


@torch.inference_mode()
def sample_prefixes(ctx: DecodeContext, chain: list[TransformBase], length: int, count: int,
                    search: BeamSearch) -> list[Prefix]:
    """Draw up to ``count`` distinct prefixes of ``length`` tokens (fewer where an EOS ends one), as a
    stochastic beam of ``count`` rows over the chain's distribution; largest perturbed score first."""
    if length == 0:
        return [Prefix()]
    grammar = grammar_of(chain)
    lm, names = ctx.lm, [t.name for t in chain]
    generator = cpu_generator(ctx.seed)
    out = lm.forward(torch.tensor([ctx.prompt_ids], device=lm.device), last=True)
    search.counters.forward_passes += 1
    logits, cache = out.logits[:, -1], out.cache  # [b, vocab]
    running: list[Prefix] = [Prefix()]
    done: list[Prefix] = []
    for i in range(length):
        context = torch.tensor([list(ctx.prompt_ids) + p.ids for p in running], device=lm.device)
        record = record_chain(chain, logits, context)
        drawn = record.logits[-1].float().log_softmax(-1)  # the chain's distribution; -inf where it cut
        if grammar is not None:  # a row the grammar leaves nowhere to go draws nothing
            dead = record.decisions[chain.index(grammar)]["dead"]
            drawn = drawn.masked_fill(dead[:, None], float("-inf"))
        raw = logits.float().log_softmax(-1)
        _, g = perturb_children([p.phi for p in running], [p.g for p in running], drawn, generator)
        children = largest_children(g, count)
        held, chosen = gumbel_top_k([p.g for p in done], children, count)
        done = [p for j, p in enumerate(done) if j in held]
        grown: list[Prefix] = []
        for j in sorted(chosen):
            g_child, row, tok = children[j]
            stages, decisions = record.row(row)
            step, token = make_step(lm, len(ctx.prompt_ids) + i, stages, names, tok, ctx.top_n, decisions=decisions)
            ended = tok in lm.eos_ids
            child = running[row].child(tok, float(raw[row, tok]), token.logprob, g_child, row, step, ended)
            (done if ended or i + 1 == length else grown).append(child)
        running = grown
        if not running:
            break
        if grammar is not None:
            grammar.advance([p.row for p in running], [p.ids[-1] for p in running])
        cache.reorder_cache(torch.tensor([p.row for p in running], device=lm.device))
        logits = lm.forward(torch.tensor([[p.ids[-1]] for p in running], device=lm.device), cache).logits[:, -1]
        search.counters.forward_passes += 1
    return sorted(done, key=lambda p: -p.g)


def place(tree: BeamTree, prefixes: list[Prefix]) -> None:
    """Each prefix as a chain of ``sampled`` nodes; tree index = the prefix's place in the draw."""
    for index, pre in enumerate(prefixes):
        score = 0.0
        for i, (tok, raw, drawn) in enumerate(zip(pre.ids, pre.raw_logprobs, pre.drawn_logprobs)):
            score += raw
            last = i + 1 == len(pre.ids)
            pre.node = tree.add(pre.node, i, tok, raw, score, "sampled", "sampled through the chain", None, 0, index,
                                drawn_logprob=drawn, **({"perturbed": pre.g} if last else {}))


@register("sample_beam", SampleBeamParams,
          "Sample the first n tokens through the chain (distinct prefixes, drawn without replacement), then "
          "beam search the rest; several prefixes make several trees.", family="beam",
          rows=("num_prefixes", "num_beams"))
def sample_beam(ctx: DecodeContext, params: SampleBeamParams) -> Iterator[Trace]:
    lm = ctx.lm
    started = ctx.clock.now()
    chain = with_grammar(build_chain(params.chain_params()), grammar_stage(ctx), params.order)
    trace = ctx.new_trace("sample_beam", params.to_dict(), [t.name for t in chain] + [SELECTOR, "beam"])
    tree = BeamTree(lm.piece, "sample_beam")
    search = BeamSearch(lm, params, tree, ctx.max_new_tokens, ctx.top_n, ctx.grammar, plan(lm, params))
    length = min(params.prefix_tokens, ctx.max_new_tokens)
    prefixes = sample_prefixes(ctx, chain, length, params.num_prefixes, search)
    place(tree, prefixes)
    extra: dict[str, Any] = beam_section_extra(params)
    extra.update(prefix_tokens=length, prefixes_asked=params.num_prefixes if length else 1,
                 prefixes_drawn=len(prefixes))
    finished: list[tuple[float | None, float, int]] = []
    records: dict[int, tuple[int, list[StepRecord]]] = {}
    if search.plan is not None:
        trace.extra["phases"] = search.plan.record()
    for i, pre in enumerate(prefixes):
        if pre.ended or length == ctx.max_new_tokens:
            if pre.ended or _whole_text(ctx, pre.ids):
                finished.append(_prefix_as_hypothesis(tree, pre, params))
            else:
                assert pre.node is not None  # placed in the tree
                tree.set_status(pre.node, "fell_off", "not a whole text of the grammar at the length limit")
            continue
        run = search.run(BeamStart(list(ctx.prompt_ids) + pre.ids, pre.score, pre.node, length, i))
        for current in run:
            publish(trace, lm, tree, current, [], search.counters.to_dict(tree), **extra)
            finish(trace, ctx, started, "running", search.counters.forward_passes)
            yield trace
        records[i] = (length, run.records)
        finished.extend(run.results())
    finished.sort(key=lambda h: -_rank_score(h, params.keep_slot))  # stable: earlier trees first on ties
    best = finished[0][2] if finished else None
    extra["trees"] = [_tree_summary(tree, i, pre, finished) for i, pre in enumerate(prefixes)]
    publish(trace, lm, tree, best, finished_records(lm, tree, finished), search.counters.to_dict(tree), **extra)
    winner = prefixes[tree.nodes[best]["tree"]] if best is not None else Prefix()
    trace.steps = winner.steps + best_path_steps(lm, tree, records, best, len(ctx.prompt_ids), "beam")
    note_phases(trace, search.plan, search.views, lm.piece)
    reason = end_reason(trace, lm, best, ctx.grammar)
    record_loops(trace, params, lm.decode)
    finish(trace, ctx, started, reason, search.counters.forward_passes)
    yield trace


def _whole_text(ctx: DecodeContext, ids: list[int]) -> bool:
    """Whether the request's grammar accepts ``ids`` as a whole text (True without a grammar)."""
    stage = grammar_stage(ctx, 1, ids)
    return stage is None or stage.accepting()


def _rank_score(hypothesis: tuple[float | None, float, int], keep_slot: bool) -> float:
    """What finished hypotheses are ranked by: the raw score under keep_slot, else the penalised one."""
    score = hypothesis[1] if keep_slot else hypothesis[0]
    assert score is not None  # penalised unless keep_slot
    return score


def _prefix_as_hypothesis(tree: BeamTree, pre: Prefix, params: SampleBeamParams) -> tuple[float | None, float, int]:
    """A prefix that already ended (EOS, or the whole budget) is a finished hypothesis by itself."""
    assert pre.node is not None
    tree.set_status(pre.node, "finished", "eos (sampled)" if pre.ended else "max_length (sampled)")
    if params.keep_slot:
        return None, pre.score, pre.node
    penalised = float(torch.tensor(pre.score, dtype=torch.float32) / (len(pre.ids) ** params.length_penalty))
    tree.nodes[pre.node]["penalised"] = rnd(penalised)
    return penalised, pre.score, pre.node


def _tree_summary(tree: BeamTree, index: int, pre: Prefix, finished: list[tuple[float | None, float, int]],
                  ) -> dict[str, Any]:
    own = [h for h in finished if tree.nodes[h[2]]["tree"] == index]
    return {"tree": index, "prefix": pre.ids, "prefix_text": "".join(tree.piece(t) for t in pre.ids),
            "prefix_score": rnd(pre.score), "prefix_perturbed": rnd(pre.g) if pre.ids else None,
            "best_node": own[0][2] if own else None,
            "best_penalised": rnd(own[0][0]) if own and own[0][0] is not None else None}
