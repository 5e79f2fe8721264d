"""Beam search: k hypotheses as one batch over a KV cache reordered by beam index.

Each step (the rules of transformers' ``generate(num_beams=k)``, so the two
agree token for token):

1. The running hypotheses are one batch ``[b, 1]`` fed after a shared KV
   cache; ``log_softmax`` of their logits plus each one's cumulative score
   gives ``b x vocab`` continuations.
2. The pool is the best ``max(2, 1 + #eos) * k`` of them, so that k
   continuations survive even if the best ones all end.
3. A continuation that ends (EOS, or the length limit) and ranks among the
   pool's first k is offered to the finished set, which keeps the k best by
   ``score / length ** length_penalty`` (length = generated tokens, EOS
   included). A finished hypothesis is never expanded again.
4. The best k continuations that do not end form the next beam, less what
   the Freitag & Al-Onaizan (2017) rules prune (strategies/beam_prune.py).
   The cache rows are gathered by parent index (skipped when the order is
   unchanged).
5. ``early_stopping`` decides when to stop, as in transformers: True when k
   hypotheses are finished; False when the best running score, divided by
   its current length ** length_penalty, cannot beat the worst finished one;
   "never" makes that test with the longest reachable length when
   length_penalty > 0 (canonical beam search).

The notes' per-beam rule "a finished beam keeps only EOS (all other logits
-inf)" is what the finished set implements without spending a beam row on it.
Every pool candidate becomes a node of the beam tree (strategies/beam_tree.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from playground.trace import Candidate, Step, Trace
from strategies.beam_prune import PruneRules, select_running
from strategies.beam_tree import BeamTree, hypothesis_record
from strategies.chain import entropy
from strategies.context import DecodeContext
from strategies.params import Params, param
from strategies.recording import finish
from strategies.registry import register

EARLY_STOPPING = {"false": False, "true": True, "never": "never"}
MAX_BEAMS = 16


@dataclass(frozen=True)
class BeamParams(Params):
    """Beam width, the finished-hypothesis rules of transformers, and the pruning knobs."""

    num_beams: int = param(4, "Hypotheses kept per step (k). 1 = greedy.", low=1, high=MAX_BEAMS, noop=1, step=1)
    length_penalty: float = param(
        1.0, "Finished hypotheses rank by score / length ** length_penalty (length = generated tokens, EOS "
        "included), as in transformers. 0 = off (raw log-probability); > 0 favours longer, < 0 shorter.",
        low=-10.0, high=10.0, noop=0.0, step=0.1, ui_max=3.0)
    early_stopping: str = param(
        "false", "When to stop, as in transformers: true = once num_beams hypotheses are finished; false = once "
        "the best running score at its current length cannot beat the worst finished one; never = that test "
        "at the longest reachable length (canonical beam search, no early stop).",
        choices=tuple(EARLY_STOPPING), noop="never")
    relative_threshold: float = param(
        0.0, "Relative threshold r_p on probabilities (Freitag & Al-Onaizan 2017): prune candidate c when "
        "P(c) <= r_p x P(best candidate), i.e. score(c) <= log(r_p) + best score. 0 = off.",
        low=0.0, high=1.0, high_open=True, noop=0.0, step=0.01)
    absolute_threshold: float = param(
        0.0, "Absolute threshold a_p in nats: prune c when score(c) <= best score - a_p. 0 = off.",
        low=0.0, high=100.0, noop=0.0, step=0.1, ui_max=10.0)
    local_threshold: float = param(
        0.0, "Relative local threshold r_pl: prune c when p(last token of c) <= r_pl x the best last-token "
        "probability among the step's candidates. 0 = off.", low=0.0, high=1.0, high_open=True, noop=0.0,
        step=0.01)
    max_candidates_per_node: int = param(
        0, "At most this many candidates with the same parent enter the beam. 0 = off.", low=0, high=MAX_BEAMS,
        noop=0, step=1)

    def __post_init__(self) -> None:
        # Accept the transformers spellings True / False / "never" as well as the strings.
        value = self.early_stopping
        object.__setattr__(self, "early_stopping", str(value).lower() if isinstance(value, (bool, str)) else value)
        super().__post_init__()

    @property
    def early(self) -> bool | str:
        return EARLY_STOPPING[self.early_stopping]

    @property
    def rules(self) -> PruneRules:
        return PruneRules(self.relative_threshold, self.absolute_threshold, self.local_threshold,
                          self.max_candidates_per_node)


BEAM_FIELDS = tuple(f for f in BeamParams.__dataclass_fields__)


# --- the finished set ---------------------------------------------------------------------------


@dataclass
class Finished:
    """The ``capacity`` best finished hypotheses, best first: (penalised score, raw score, node)."""

    capacity: int
    items: list[tuple[float, float, int]] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return len(self.items) >= self.capacity

    def worst(self) -> float:
        return self.items[-1][0]

    def offer(self, new: list[tuple[float, float, int]]) -> tuple[list[int], list[int]]:
        """Merge ``new`` (pool order) and keep the best; return (old nodes pushed out, new nodes refused).

        The sort is stable with the older hypotheses first, so ties keep what was there.
        """
        merged = sorted(self.items + new, key=lambda h: -h[0])
        self.items, out = merged[:self.capacity], merged[self.capacity:]
        new_ids = {h[2] for h in new}
        return [h[2] for h in out if h[2] not in new_ids], [h[2] for h in out if h[2] in new_ids]


# --- one search from one starting point -----------------------------------------------------------


@dataclass
class BeamStart:
    """Where a search begins."""

    ids: list[int]  # prompt, plus any sampled prefix
    score: float = 0.0  # log-probability of that prefix
    parent: int | None = None  # the prefix's last node in the tree
    offset: int = 0  # tokens generated before the search
    tree: int = 0


@dataclass
class StepRecord:
    """What the best path's trace steps need from one step: each row's top candidates."""

    parents: list[int | None]  # node expanded in each row
    scores: list[float]  # each row's cumulative score
    top_ids: list[list[int]]  # [row][n] by the search's own log-probabilities
    top_logprobs: list[list[float]]  # the search's own (tempered, for stochastic beams)
    top_raw: list[list[float]]  # the model's
    entropy: list[float]
    raw_entropy: list[float]
    chosen: set[tuple[int, int]] = field(default_factory=set)  # (row, token) that became kept / finished


def record_step(parents: list[int | None], scores: torch.Tensor, logprobs: torch.Tensor,
                raw_logprobs: torch.Tensor, top_n: int) -> StepRecord:
    """Each row's top ``top_n`` candidates: logprobs and raw_logprobs are [b, vocab]."""
    top = logprobs.topk(min(top_n, logprobs.shape[-1]), dim=-1)
    same = raw_logprobs is logprobs
    raw_top = top.values if same else raw_logprobs.gather(1, top.indices)
    ent = entropy(logprobs).tolist()
    return StepRecord(list(parents), scores.tolist(), top.indices.tolist(), top.values.tolist(),
                      raw_top.tolist(), ent, ent if same else entropy(raw_logprobs).tolist())


@dataclass
class Counters:
    """Work done, summed over every search of a run."""

    expanded: int = 0  # hypotheses fed to the model (rows of logits used)
    expanded_without_pruning: int = 0  # the same, had no rule pruned anything at each step
    forward_passes: int = 0
    cache_reorders: int = 0
    cache_reorders_skipped: int = 0

    def to_dict(self, tree: BeamTree) -> dict[str, Any]:
        pruned: dict[str, int] = {}
        for n in tree.nodes:
            if n["status"] == "pruned":
                pruned[n["reason"]] = pruned.get(n["reason"], 0) + 1
        considered = [n for n in tree.nodes if n["status"] != "sampled"]
        return {"candidates": len(considered), "kept": tree.count("kept"), "finished": tree.count("finished"),
                "pruned": sum(pruned.values()), "pruned_by_rule": dict(sorted(pruned.items())),
                "fell_off": tree.count("fell_off"), "expanded": self.expanded,
                "expanded_without_pruning": self.expanded_without_pruning,
                "forward_passes": self.forward_passes, "cache_reorders": self.cache_reorders,
                "cache_reorders_skipped": self.cache_reorders_skipped}


class BeamSearch:
    """Runs beam searches that share a model, parameters, a tree and counters."""

    def __init__(self, lm: Any, params: BeamParams, tree: BeamTree, max_total: int, top_n: int = 20):
        self.lm, self.params, self.tree = lm, params, tree
        self.max_total = max_total  # generated tokens allowed, prefix included
        self.top_n = top_n
        self.eos = frozenset(int(e) for e in lm.eos_ids)
        self.pool_size = max(2, 1 + len(self.eos)) * params.num_beams
        self.counters = Counters()

    def run(self, start: BeamStart) -> "BeamRun":
        return BeamRun(self, start)


class BeamRun:
    """One search; iterate it to advance step by step (yields the current best node)."""

    def __init__(self, search: BeamSearch, start: BeamStart):
        self.search, self.start = search, start
        self.finished = Finished(search.params.num_beams)
        self.records: list[StepRecord] = []
        self.stopped_by = ""

    # -- the loop ------------------------------------------------------------------------------

    @torch.inference_mode()
    def __iter__(self) -> Iterator[int | None]:
        s, start, p = self.search, self.start, self.search.params
        lm, c = s.lm, s.counters
        out = lm.forward(torch.tensor([start.ids], device=lm.device))
        c.forward_passes += 1
        c.expanded += 1
        c.expanded_without_pruning += 1
        logits, cache = out.logits[:, -1], out.cache
        parents: list[int | None] = [start.parent]
        scores = torch.tensor([start.score], dtype=torch.float32, device=logits.device)
        for t in range(s.max_total - start.offset):
            logprobs = logits.log_softmax(-1)  # [b, vocab]
            kept, width = self._step(start.offset + t, logprobs, scores, parents)
            yield kept[0][0] if kept else (self.finished.items[0][2] if self.finished.items else None)
            if not kept:  # every candidate ended: the length limit, or EOS everywhere
                self.stopped_by = "length" if start.offset + t + 1 >= s.max_total else "all_ended"
                return
            gen_len = start.offset + t + 1
            if p.early is True and self.finished.full:
                self.stopped_by = "early_stopping"
                return
            scores = torch.stack([sc for _, _, _, sc in kept])  # [b'] float32, as transformers keeps them
            if not self._can_improve(scores[:1], gen_len):
                self.stopped_by = "no_improvement"
                return
            cache = self._reorder(cache, [row for _, row, _, _ in kept], len(parents))
            parents = [node for node, _, _, _ in kept]
            tokens = torch.tensor([[tok] for _, _, tok, _ in kept], device=lm.device)
            logits = lm.forward(tokens, cache).logits[:, -1]
            c.forward_passes += 1
            c.expanded += len(kept)
            c.expanded_without_pruning += width
        self.stopped_by = "length"

    def _step(self, step: int, logprobs: torch.Tensor, scores: torch.Tensor, parents: list[int | None],
              ) -> tuple[list[tuple[int, int, int, torch.Tensor]], int]:
        """Rank the pool, record its nodes, update the finished set.

        Returns the new beam as (node, parent row, token, score) in rank order, and how wide the
        beam would have been without pruning.
        """
        s, p, tree = self.search, self.search.params, self.search.tree
        vocab = logprobs.shape[-1]
        self._record(parents, scores, logprobs)
        total = logprobs + scores[:, None]  # [b, vocab] cumulative scores of every continuation
        pool_scores, flat = total.view(-1).topk(min(s.pool_size, total.numel()))
        rows = (flat // vocab).tolist()
        toks = (flat % vocab).tolist()
        tok_lps = logprobs.view(-1)[flat].tolist()
        score_list = pool_scores.tolist()
        last = step + 1 >= s.max_total
        stops = [last or tok in s.eos for tok in toks]
        rules = p.rules
        bounds = rules.bounds(score_list[0], max(tok_lps)) if rules.active else {}
        decisions = select_running(score_list, tok_lps, rows, stops, p.num_beams, rules, bounds)
        penalised = (pool_scores / ((step + 1) ** p.length_penalty)).tolist()
        offers: list[tuple[float, float, int]] = []
        kept: list[tuple[int, int, int, torch.Tensor]] = []
        record = self.records[-1]
        for j, (row, tok, lp, sc, dec) in enumerate(zip(rows, toks, tok_lps, score_list, decisions)):
            args = (parents[row], step, tok, lp, sc)
            if dec is not None:  # a continuation: kept, pruned, or below the beam
                node = tree.add(*args, dec.status, dec.reason, dec.threshold, j, self.start.tree)
                if dec.status == "kept":
                    kept.append((node, row, tok, pool_scores[j]))
                    record.chosen.add((row, tok))
            elif j < p.num_beams:  # an ending among the pool's first k: offered to the finished set
                node = tree.add(*args, "finished", self._why(tok), None, j, self.start.tree,
                                penalised=penalised[j])
                offers.append((penalised[j], sc, node))
                record.chosen.add((row, tok))
            else:  # transformers only finishes endings among the pool's first k
                tree.add(*args, "fell_off", f"{self._why(tok)}, ranked below the pool's first {p.num_beams}",
                         None, j, self.start.tree)
        self._settle(offers, step)
        width = min(p.num_beams, sum(1 for d in decisions if d is not None))
        return kept, width

    def _why(self, token_id: int) -> str:
        return "eos" if token_id in self.search.eos else "max_length"

    def _settle(self, offers: list[tuple[float, float, int]], step: int) -> None:
        if not offers:
            return
        k = self.search.params.num_beams
        pushed, refused = self.finished.offer(offers)
        for node in pushed:
            self.search.tree.set_status(node, "fell_off", f"finished, pushed out of the {k} best at step {step}")
        for node in refused:
            self.search.tree.set_status(node, "fell_off", f"finished below the {k} best finished")

    def _can_improve(self, best_running: torch.Tensor, gen_len: int) -> bool:
        """transformers' early-stop heuristic: can the best running hypothesis still beat the worst finished?"""
        p = self.search.params
        if not self.finished.full:
            return True
        length = self.search.max_total if (p.early == "never" and p.length_penalty > 0) else gen_len
        best_possible = float(best_running / (length ** p.length_penalty))
        return best_possible > self.finished.worst()

    def _reorder(self, cache: Any, rows: list[int], width: int) -> Any:
        """Gather the cache rows of the new beam's parents; skip the copy when nothing moves."""
        c = self.search.counters
        if rows == list(range(width)):
            c.cache_reorders_skipped += 1
            return cache
        cache.reorder_cache(torch.tensor(rows, device=self.search.lm.device))
        c.cache_reorders += 1
        return cache

    def _record(self, parents: list[int | None], scores: torch.Tensor, logprobs: torch.Tensor) -> None:
        self.records.append(record_step(parents, scores, logprobs, logprobs, self.search.top_n))

    # -- results -------------------------------------------------------------------------------

    def best(self) -> int | None:
        return self.finished.items[0][2] if self.finished.items else None


# --- trace assembly -----------------------------------------------------------------------------


def best_path_steps(lm: Any, tree: BeamTree, records: dict[int, tuple[int, list[StepRecord]]],
                    best: int | None, prompt_len: int) -> list[Step]:
    """trace.steps for the searched part of the best path: at each step, the top candidates of the
    row the winning hypothesis grew from. ``records`` maps a tree index to (offset, its records)."""
    steps: list[Step] = []
    for node_id in tree.path(best):
        node = tree.nodes[node_id]
        if node["status"] == "sampled" or node["tree"] not in records:
            continue
        offset, recs = records[node["tree"]]
        rec = recs[node["step"] - offset]
        row = rec.parents.index(node["parent"])
        ids, lps, raws = list(rec.top_ids[row]), list(rec.top_logprobs[row]), list(rec.top_raw[row])
        if node["token_id"] not in ids:
            _, drawn, raw = tree.logprobs(node_id)
            ids.append(node["token_id"])
            lps.append(drawn)
            raws.append(raw)
        cands = [Candidate(i, lm.piece(i), math.exp(raw), math.exp(lp), (row, i) in rec.chosen,
                           {"score": rec.scores[row] + lp}) for i, lp, raw in zip(ids, lps, raws)]
        steps.append(Step(prompt_len + node["step"], node["token_id"], cands, entropy=rec.entropy[row],
                          raw_entropy=rec.raw_entropy[row], extra={"beam_node": node_id}))
    return steps


def finished_records(lm: Any, tree: BeamTree, items: list[tuple[float, float, int]]) -> list[dict[str, Any]]:
    eos = lm.eos_ids
    return [hypothesis_record(tree, node, score, pen, lm.decode,
                              eos=tree.nodes[node]["token_id"] in eos) for pen, score, node in items]


def publish(trace: Trace, lm: Any, tree: BeamTree, best: int | None, finished: list[dict[str, Any]],
            counters: dict[str, Any], **extra: Any) -> None:
    """Point the trace at the current best hypothesis and the tree so far."""
    trace.tokens = tree.tokens(best)
    trace.beam = tree.to_dict(best, finished, counters, **extra)


def beam_section_extra(params: BeamParams) -> dict[str, Any]:
    return {"num_beams": params.num_beams, "length_penalty": params.length_penalty,
            "early_stopping": params.early_stopping}


@register("beam", BeamParams,
          "Beam search: k hypotheses in one batch over a reordered KV cache, transformers' finishing rules, "
          "optional Freitag & Al-Onaizan pruning; the whole search tree is traced.", family="beam")
def beam(ctx: DecodeContext, params: BeamParams) -> Iterator[Trace]:
    lm = ctx.lm
    started = ctx.clock.now()
    trace = ctx.new_trace("beam", params.to_dict(), ["beam"])
    tree = BeamTree(lm.piece, "beam")
    search = BeamSearch(lm, params, tree, ctx.max_new_tokens, ctx.top_n)
    run = search.run(BeamStart(list(ctx.prompt_ids)))
    extra = beam_section_extra(params)
    for current in run:
        publish(trace, lm, tree, current, [], search.counters.to_dict(tree), **extra)
        finish(trace, ctx, started, "running", search.counters.forward_passes)
        yield trace
    best = run.best()
    publish(trace, lm, tree, best, finished_records(lm, tree, run.finished.items),
            search.counters.to_dict(tree), stopped_by=run.stopped_by, **extra)
    trace.steps = best_path_steps(lm, tree, {0: (0, run.records)}, best, len(ctx.prompt_ids))
    reason = "eos" if trace.tokens and trace.tokens[-1].id in lm.eos_ids else "length"
    finish(trace, ctx, started, reason, search.counters.forward_passes)
    yield trace
