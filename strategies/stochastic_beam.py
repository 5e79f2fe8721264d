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
softmax(logits / T) instead of the model's own distribution.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from playground.trace import Trace
from strategies.beam import MAX_BEAMS, StepRecord, best_path_steps, publish, record_step
from strategies.beam_tree import BeamTree, hypothesis_record
from strategies.context import DecodeContext
from strategies.params import Params, param
from strategies.recording import finish
from strategies.registry import register


@dataclass(frozen=True)
class StochasticBeamParams(Params):
    num_beams: int = param(4, "Sequences sampled without replacement (k). 1 = one exact sample, as ancestral "
                           "sampling would draw.", low=1, high=MAX_BEAMS, noop=1, step=1)
    temperature: float = param(1.0, "Sample sequences from softmax(logits / T). 1 = the model's own "
                               "distribution (no-op).", low=0.0, high=10.0, low_open=True, noop=1.0, step=0.05,
                               ui_max=3.0)


def gumbel(shape: torch.Size, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Standard Gumbel noise -log(-log U), float64."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64, device=device)
    return -torch.log(-torch.log(u))


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x <= 0, accurate at both ends (Maechler 2012)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def conditional_gumbel(parent_g: torch.Tensor, perturbed: torch.Tensor) -> torch.Tensor:
    """Children's perturbed scores conditioned on their maximum being the parent's.

    parent_g: [b, 1]; perturbed: [b, vocab] = phi + Gumbel noise. Kool et al. 2019, appendix B:
    v = G_S - G~_i + log1mexp(G~_i - Z), G_i = G_S - max(v, 0) - log1p(exp(-|v|)).
    """
    z = perturbed.amax(dim=-1, keepdim=True)
    v = parent_g - perturbed + log1mexp(perturbed - z)
    return parent_g - v.clamp(min=0) - torch.log1p(torch.exp(-v.abs()))


@dataclass
class Item:
    """A hypothesis in the beam: its last node, log-probability phi, perturbed score G."""

    node: int
    phi: float
    g: float
    row: int = -1  # cache row of its parent, for running items


@register("stochastic_beam", StochasticBeamParams,
          "Gumbel-top-k stochastic beam search (Kool et al. 2019): k sequences sampled without replacement.",
          family="beam")
def stochastic_beam(ctx: DecodeContext, params: StochasticBeamParams) -> Iterator[Trace]:
    lm, k = ctx.lm, params.num_beams
    started = ctx.clock.now()
    trace = ctx.new_trace("stochastic_beam", params.to_dict(), ["gumbel-top-k"])
    tree = BeamTree(lm.piece, "stochastic_beam")
    search = _Search(ctx, params, tree)
    extra = {"num_beams": k, "temperature": params.temperature, "score_label": "log-probability (phi)"}
    for current in search:
        publish(trace, lm, tree, current, [], search.counters(), **extra)
        finish(trace, ctx, started, "running", search.passes)
        yield trace
    done = sorted(search.done, key=lambda it: -it.g)
    finished = [hypothesis_record(tree, it.node, it.phi, None, lm.decode, perturbed=it.g,
                                  eos=tree.nodes[it.node]["token_id"] in lm.eos_ids) for it in done]
    best = done[0].node if done else None
    publish(trace, lm, tree, best, finished, search.counters(), **extra)
    trace.steps = best_path_steps(lm, tree, {0: (0, search.records)}, best, len(ctx.prompt_ids))
    reason = "eos" if trace.tokens and trace.tokens[-1].id in lm.eos_ids else "length"
    finish(trace, ctx, started, reason, search.passes)
    yield trace


class _Search:
    """The loop; iterate to advance a step (yields the node with the largest G so far)."""

    def __init__(self, ctx: DecodeContext, params: StochasticBeamParams, tree: BeamTree):
        self.ctx, self.params, self.tree = ctx, params, tree
        self.generator = ctx.generator()
        self.done: list[Item] = []  # finished hypotheses in the beam
        self.records: list[StepRecord] = []
        self.passes = self.expanded = self.reorders = 0

    @torch.inference_mode()
    def __iter__(self) -> Iterator[int | None]:
        lm = self.ctx.lm
        out = lm.forward(torch.tensor([self.ctx.prompt_ids], device=lm.device))
        self.passes, self.expanded = 1, 1
        logits, cache = out.logits[:, -1], out.cache
        running = [Item(-1, 0.0, 0.0)]  # the root: phi = G = 0
        for t in range(self.ctx.max_new_tokens):
            running = self._step(t, logits, running, last=t + 1 == self.ctx.max_new_tokens)
            yield max(self.done + running, key=lambda it: it.g).node
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
        k, tree, eos = self.params.num_beams, self.tree, self.ctx.lm.eos_ids
        raw = logits.log_softmax(-1)  # [b, vocab]
        logprobs = raw if self.params.temperature == 1.0 else (logits / self.params.temperature).log_softmax(-1)
        parents = [None if it.node < 0 else it.node for it in running]
        phi = torch.tensor([it.phi for it in running], dtype=torch.float64, device=logits.device)
        g_parent = torch.tensor([[it.g] for it in running], dtype=torch.float64, device=logits.device)
        self.records.append(record_step(parents, phi.float(), logprobs, raw, self.ctx.top_n))
        child_phi = phi[:, None] + logprobs.double()  # [b, vocab]
        g = conditional_gumbel(g_parent, child_phi + gumbel(child_phi.shape, self.generator, logits.device))
        pool_g, flat = g.view(-1).topk(min(2 * k, g.numel()))
        vocab = logits.shape[-1]
        pool = [(float(pg), int(f) // vocab, int(f) % vocab) for pg, f in zip(pool_g.tolist(), flat.tolist())]
        # The beam: the k largest G among the new children and the finished hypotheses kept so far.
        ranked = sorted([(it.g, "done", i) for i, it in enumerate(self.done)] +
                        [(pg, "new", j) for j, (pg, _, _) in enumerate(pool)], key=lambda e: -e[0])[:k]
        chosen = {(kind, i) for _, kind, i in ranked}
        for i, it in enumerate(self.done):
            if ("done", i) not in chosen:
                tree.set_status(it.node, "fell_off", f"finished, displaced by {k} larger perturbed scores at "
                                f"step {step}")
        self.done = [it for i, it in enumerate(self.done) if ("done", i) in chosen]
        record, new_running = self.records[-1], []
        for j, (pg, row, tok) in enumerate(pool):
            lp, cphi = float(logprobs[row, tok]), float(child_phi[row, tok])
            stop = last or tok in eos
            if ("new", j) not in chosen:
                status, reason = "fell_off", f"perturbed score below the {k} largest"
            else:
                status, reason = ("finished", "eos" if tok in eos else "max_length") if stop else ("kept", "")
                record.chosen.add((row, tok))
            node = tree.add(parents[row], step, tok, lp, cphi, status, reason, None, j, 0,
                            raw_logprob=float(raw[row, tok]), perturbed=pg)
            if status == "finished":
                self.done.append(Item(node, cphi, pg))
            elif status == "kept":
                new_running.append(Item(node, cphi, pg, row))
        return new_running

    def counters(self) -> dict[str, Any]:
        t = self.tree
        return {"candidates": len(t.nodes), "kept": t.count("kept"), "finished": t.count("finished"),
                "pruned": 0, "pruned_by_rule": {}, "fell_off": t.count("fell_off"), "expanded": self.expanded,
                "expanded_without_pruning": self.expanded, "forward_passes": self.passes,
                "cache_reorders": self.reorders}
