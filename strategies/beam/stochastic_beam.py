"""Stochastic beam search: k sequences sampled without replacement.

Kool, van Hoof & Welling (2019), "Stochastic Beams and Where to Find Them:
The Gumbel-Top-k Trick for Sampling Sequences Without Replacement".

Perturb the log-probability phi(y) of every complete sequence y with an
independent Gumbel(0) noise; the k sequences with the largest perturbed
scores G(y) are a sample without replacement from the model's sequence
distribution, and the first is an exact sample. The search finds them
top-down without enumerating sequences: a prefix S carries phi_S and G_S,
the maximum of its descendants' perturbed scores. Its children get
G~_i = phi_i + Gumbel(0), then are conditioned on their maximum being G_S:

    Z = max_i G~_i,   G_i = -log(exp(-G_S) - exp(-Z) + exp(-G~_i))

(computed in the stable form of the paper's appendix B), and the beam keeps
the k largest G over every child of every running prefix. A finished
sequence (EOS, or the length limit) stays in the beam with its G and is not
expanded; it leaves only if k larger G appear. The root has phi = G = 0.

Sequences cut at the length limit count as complete, so the sample is from
the distribution of length-capped sequences. ``temperature`` samples from
softmax(logits / T) instead of the model's own distribution; phi then sums
tempered log-probabilities, and the trace keeps the model's own sum beside it
(``model_score``). The Gumbel maths runs in float64 on the CPU whatever the
model's device (Apple's MPS has no float64), from a CPU generator seeded from
the request.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from playground.trace import Trace
from strategies.beam.beam_params import MAX_BEAMS
from strategies.beam.beam_trace import StepRecord, best_path_steps, end_reason, publish, record_step
from strategies.beam.tree import BeamTree, hypothesis_record
from strategies.context import DecodeContext
from strategies.loops import LoopParams, record_loops
from strategies.params import param
from strategies.recording import finish
from strategies.registry import Draws, register
from strategies.sampling.grammar import constrain_rows, ends_whole, grammar_stage
from strategies.sampling.transforms import Temperature

SELECTOR = "gumbel-top-k"


@dataclass(frozen=True)
class StochasticBeamParams(LoopParams):
    """The sample's size and temperature; loops are looked for on the best sequence."""

    num_beams: int = param(4, "Sequences sampled without replacement (k). 1 = one exact sample, as ancestral "
                           "sampling would draw.", low=1, high=MAX_BEAMS, noop=1, step=1)
    temperature: float = param(1.0, "Sample sequences from softmax(logits / T). 1 = the model's own "
                               "distribution (no-op).", low=0.0, high=10.0, low_open=True, noop=1.0, step=0.05,
                               ui_max=3.0)


def cpu_generator(seed: int) -> torch.Generator:
    """The Gumbel noise's generator: on the CPU, where float64 exists on every platform."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def gumbel(shape: torch.Size, generator: torch.Generator) -> torch.Tensor:
    """Standard Gumbel noise -log(-log U), float64 on the CPU."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64)
    return -torch.log(-torch.log(u))


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x <= 0, accurate at both ends (Maechler 2012)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def conditional_gumbel(parent_g: torch.Tensor, perturbed: torch.Tensor) -> torch.Tensor:
    """Children's perturbed scores conditioned on their maximum being the parent's.

    parent_g: [b, 1]; perturbed: [b, vocab] = phi + Gumbel noise. Kool et al. 2019, appendix B:
    v = G_S - G~_i + log1mexp(G~_i - Z), G_i = G_S - max(v, 0) - log1p(exp(-|v|)).
    Children with phi = -inf (cut by a truncation) get G = -inf.
    """
    z = perturbed.amax(dim=-1, keepdim=True)
    v = parent_g - perturbed + log1mexp(perturbed - z)
    return parent_g - v.clamp(min=0) - torch.log1p(torch.exp(-v.abs()))


def perturb_children(phi: list[float], parent_g: list[float], logprobs: torch.Tensor,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Every child's phi and perturbed score G, in float64 on the CPU.

    phi, parent_g: [b] of the running prefixes; logprobs: [b, vocab] on the model's device (moved
    before it is widened, as MPS cannot hold float64). Returns (child phi, G), both [b, vocab].
    """
    lp = logprobs.detach().cpu().double()
    child_phi = torch.tensor(phi, dtype=torch.float64)[:, None] + lp
    g = conditional_gumbel(torch.tensor(parent_g, dtype=torch.float64)[:, None],
                           child_phi + gumbel(lp.shape, generator))
    return child_phi, g


def largest_children(g: torch.Tensor, n: int) -> list[tuple[float, int, int]]:
    """The ``n`` largest finite G of ``g`` [b, vocab] as (G, row, token), largest first."""
    values, flat = g.view(-1).topk(min(n, g.numel()))
    vocab = g.shape[-1]
    return [(v, f // vocab, f % vocab) for v, f in zip(values.tolist(), flat.tolist()) if v > float("-inf")]


def gumbel_top_k(held: list[float], children: list[tuple[float, int, int]], k: int) -> tuple[set[int], set[int]]:
    """The k largest G among the finished items held in the beam and the new children (held first on
    ties): (indices into ``held``, indices into ``children``) that stay."""
    entries = [(g, 0, i) for i, g in enumerate(held)] + [(g, 1, j) for j, (g, _, _) in enumerate(children)]
    top = sorted(entries, key=lambda e: -e[0])[:k]
    return {i for _, kind, i in top if kind == 0}, {i for _, kind, i in top if kind == 1}


@dataclass
class Item:
    """A hypothesis in the beam: its last node, log-probability phi, perturbed score G, the model's
    own log-probability (differs from phi at T != 1)."""

    node: int
    phi: float
    g: float
    model_score: float
    row: int = -1  # cache row of its parent, for running items


def single_sample_reference(params: StochasticBeamParams) -> list | None:
    """With k = 1 the sampled set is one exact sample of the model's sequence distribution at the temperature
    (Kool et al. 2019), which sample many tests against; with k > 1 an outcome's inclusion probability has no
    closed form: None."""
    if params.num_beams != 1:
        return None
    return [] if params.temperature == 1.0 else [Temperature(params.temperature)]


@register("stochastic_beam", StochasticBeamParams,
          "Gumbel-top-k stochastic beam search (Kool et al. 2019): k sequences sampled without replacement.",
          family="beam", rows=("num_beams",), draws=Draws(reference=single_sample_reference, finished_set=True,
                                     reference_name="the model's sequence distribution (k = 1: one exact sample)"))
def stochastic_beam(ctx: DecodeContext, params: StochasticBeamParams) -> Iterator[Trace]:
    lm, k, temperature = ctx.lm, params.num_beams, params.temperature
    started = ctx.clock.now()
    trace = ctx.new_trace("stochastic_beam", params.to_dict(), ([] if ctx.grammar is None else ["grammar"]) + [SELECTOR])
    tree = BeamTree(lm.piece, "stochastic_beam")
    search = _Search(ctx, params, tree)
    extra: dict[str, Any] = {"num_beams": k, "temperature": temperature}
    if temperature != 1.0:
        extra.update(logprob_label=f"tempered log-prob (T={temperature:g})",
                     score_label=f"tempered log-prob sum phi (T={temperature:g})")
    else:
        extra.update(logprob_label="log-prob", score_label="log-prob sum phi")
    for current in search:
        publish(trace, lm, tree, current, [], search.counters(), **extra)
        finish(trace, ctx, started, "running", search.passes)
        yield trace
    done = sorted(search.done, key=lambda it: -it.g)
    finished = [hypothesis_record(tree, it.node, it.model_score, None, lm.decode, phi=it.phi, perturbed=it.g,
                                  eos=tree.nodes[it.node]["token_id"] in lm.eos_ids) for it in done]
    best = done[0].node if done else None
    publish(trace, lm, tree, best, finished, search.counters(), **extra)
    trace.steps = best_path_steps(lm, tree, {0: (0, search.records)}, best, len(ctx.prompt_ids), SELECTOR)
    reached = len(search.records) >= ctx.max_new_tokens  # else every prefix came to a grammar's dead end
    record_loops(trace, params, lm.decode)
    finish(trace, ctx, started, end_reason(trace, lm, best, ctx.grammar, reached), search.passes)
    yield trace


class _Search:
    """The loop; iterate to advance a step (yields the node with the largest G so far)."""

    def __init__(self, ctx: DecodeContext, params: StochasticBeamParams, tree: BeamTree):
        self.ctx, self.params, self.tree = ctx, params, tree
        self.generator = cpu_generator(ctx.seed)
        self.done: list[Item] = []  # finished hypotheses in the beam
        self.records: list[StepRecord] = []
        self.passes = self.expanded = self.reorders = 0
        self.grammar = grammar_stage(ctx)  # one matcher per running prefix, under a grammar

    @torch.inference_mode()
    def __iter__(self) -> Iterator[int | None]:
        lm = self.ctx.lm
        out = lm.forward(torch.tensor([self.ctx.prompt_ids], device=lm.device), last=True)
        self.passes, self.expanded = 1, 1
        logits, cache = out.logits[:, -1], out.cache
        running = [Item(-1, 0.0, 0.0, 0.0)]  # the root: phi = G = 0
        for t in range(self.ctx.max_new_tokens):
            running = self._step(t, logits, running, last=t + 1 == self.ctx.max_new_tokens)
            yield max(self.done + running, key=lambda it: it.g).node if self.done or running else None
            if not running:
                return
            rows = [it.row for it in running]
            if rows != list(range(logits.shape[0])):
                cache.reorder_cache(torch.tensor(rows, device=lm.device))
                self.reorders += 1
            tokens = torch.tensor([[self.tree.nodes[it.node]["token_id"]] for it in running], device=lm.device)
            logits = lm.forward(tokens, cache).logits[:, -1]
            self.passes += 1
            self.expanded += len(running)

    def _step(self, step: int, logits: torch.Tensor, running: list[Item], last: bool) -> list[Item]:
        """Perturb every child of every running prefix, keep the k largest G with the finished ones."""
        k, tree, eos, temperature = self.params.num_beams, self.tree, self.ctx.lm.eos_ids, self.params.temperature
        raw = logits.float().log_softmax(-1)  # [b, vocab]
        logprobs = raw if temperature == 1.0 else (logits.float() / temperature).log_softmax(-1)
        decisions = None
        if self.grammar is not None:  # sampled over what the grammar allows, renormalised row by row
            logprobs, decisions = constrain_rows(self.grammar, logprobs, True)
        parents = [None if it.node < 0 else it.node for it in running]
        phi = [it.phi for it in running]
        self.records.append(record_step(parents, torch.tensor(phi, dtype=torch.float32), logprobs, raw,
                                        self.ctx.top_n))
        if decisions is not None:
            self.records[-1].own_stage, self.records[-1].decisions = "grammar", decisions
        child_phi, g = perturb_children(phi, [it.g for it in running], logprobs, self.generator)
        pool = largest_children(g, 2 * k)
        if last and self.grammar is not None:  # at the length limit only whole texts of the grammar can end
            pool = [c for c in pool if ends_whole(self.grammar, c[1], c[2])]
        held, chosen = gumbel_top_k([it.g for it in self.done], pool, k)
        for i, it in enumerate(self.done):
            if i not in held:
                tree.set_status(it.node, "fell_off", f"finished, displaced by {k} larger perturbed scores at "
                                f"step {step}")
        self.done = [it for i, it in enumerate(self.done) if i in held]
        ids = torch.tensor([[row, tok] for _, row, tok in pool], device=logits.device, dtype=torch.long).view(-1, 2)
        lps = logprobs[ids[:, 0], ids[:, 1]].tolist()
        raws = raw[ids[:, 0], ids[:, 1]].tolist()
        record, new_running = self.records[-1], []
        for j, ((pg, row, tok), lp, raw_lp) in enumerate(zip(pool, lps, raws)):
            cphi, model_score = float(child_phi[row, tok]), running[row].model_score + raw_lp
            stop = last or tok in eos
            if j not in chosen:
                status, reason = "fell_off", f"perturbed score below the {k} largest"
            else:
                status, reason = ("finished", "eos" if tok in eos else "max_length") if stop else ("kept", "")
                record.enter(row, tok, lp, raw_lp)
            node = tree.add(parents[row], step, tok, lp, cphi, status, reason, None, j, 0, raw_logprob=raw_lp,
                            perturbed=pg, model_logprob=raw_lp, model_score=model_score)
            if status == "finished":
                self.done.append(Item(node, cphi, pg, model_score))
            elif status == "kept":
                new_running.append(Item(node, cphi, pg, model_score, row))
        if self.grammar is not None and new_running:
            self.grammar.advance([it.row for it in new_running],
                                 [tree.nodes[it.node]["token_id"] for it in new_running])
        return new_running

    def counters(self) -> dict[str, Any]:
        t = self.tree
        return {"candidates": len(t.nodes), "kept": t.count("kept"), "finished": t.count("finished"),
                "pruned": 0, "pruned_by_rule": {}, "fell_off": t.count("fell_off"), "expanded": self.expanded,
                "expanded_without_pruning": self.expanded, "forward_passes": self.passes,
                "cache_reorders": self.reorders}
