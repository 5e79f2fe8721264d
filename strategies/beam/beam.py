"""Beam search: k hypotheses as one batch over a KV cache reordered by beam index.

Each step:

1. The running hypotheses are one batch ``[b, 1]`` fed after a shared KV
   cache; ``log_softmax`` of their logits plus each one's cumulative score
   gives ``b x vocab`` continuations, of which the best
   ``max(2, 1 + #eos) * k`` form the step's pool (so that k continuations
   survive even if the best ones all end).
2. The pool fills the beam by one of two finishing rules (``finishing``):

   - ``transformers`` (default), the rule of transformers'
     ``generate(num_beams=k)``, which this search matches token for token:
     a continuation that ends (EOS, or the length limit) and ranks among the
     pool's first k leaves the beam for a separate finished set, which keeps
     the k best by ``score / length ** length_penalty`` (length = generated
     tokens, EOS included); the best k continuations that do not end are the
     beam, so k hypotheses keep running. ``early_stopping`` decides when to
     stop: True when k hypotheses are finished; False when the best running
     score, divided by its current length ** length_penalty, cannot beat the
     worst finished one; "never" makes that test with the longest reachable
     length when length_penalty > 0.
   - ``keep_slot``, the textbook rule of the course notes: a finished
     hypothesis stays in the beam (its only continuation is EOS at
     log-probability 0, so its score no longer changes) and competes for the
     k slots with the running ones by raw summed log-probability; the search
     runs to the length limit and returns the finished hypotheses of the
     final beam, best first. It stops earlier only when every slot holds a
     finished hypothesis, after which nothing could change. length_penalty
     and early_stopping do not apply. As hypotheses finish, fewer slots run,
     so the two rules can return different best hypotheses.

   A hypothesis in its thinking phase (strategies/phases.py) carries its own clock: once its thinking
   budget is spent, its row may continue only with the token the budget forces (every other token at
   -inf, the forced one at the model's own log-probability, so a score stays the log-probability of
   its text); the model's view of each forced token is kept by the node it became.
3. The continuations that won a slot and do not end are the active list that
   the Freitag & Al-Onaizan (2017) rules prune (strategies/beam/prune.py).
   The survivors are fed to the model at the next step; the cache rows are
   gathered by parent index (skipped when the order is unchanged).

Every pool candidate becomes a node of the beam tree (strategies/beam/tree.py); the step records
and the trace built from them are in strategies/beam/beam_trace.py, its parameters (``BeamParams``)
in strategies/beam/beam_params.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from playground.seam import LanguageModel
from playground.trace import Trace
from strategies.beam.beam_params import BeamParams
from strategies.beam.beam_trace import (
    StepRecord,
    beam_section_extra,
    best_path_steps,
    end_reason,
    finished_records,
    note_phases,
    publish,
    record_step,
)
from strategies.beam.prune import prune
from strategies.beam.tree import BeamTree
from strategies.context import DecodeContext
from strategies.loops import record_loops
from strategies.phases import Clock, Plan, model_view, plan
from strategies.recording import finish
from strategies.registry import Draws, register
from strategies.sampling.grammar import Grammar, constrain_rows, ends_whole

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

    def __init__(self, lm: LanguageModel, params: BeamParams, tree: BeamTree, max_total: int, top_n: int = 20,
                 grammar: Any = None, phases: Plan | None = None):
        self.lm, self.params, self.tree = lm, params, tree
        self.grammar = grammar  # a CompiledGrammar every hypothesis follows, or None
        self.plan = phases  # the phases every hypothesis goes through (strategies/phases.py), or None
        self.max_total = max_total  # generated tokens allowed, prefix included
        self.top_n = top_n
        self.eos = frozenset(int(e) for e in lm.eos_ids)
        self.pool_size = max(2, 1 + len(self.eos)) * params.num_beams
        self.counters = Counters()
        self.views: dict[int, dict[str, Any]] = {}  # node of a token the budget forced -> the model's view of it

    def run(self, start: BeamStart) -> "BeamRun":
        return BeamRun(self, start)


@dataclass
class Pool:
    """A step's candidates, best first: flat lists, one entry per candidate."""

    scores: torch.Tensor  # [n] float32 cumulative scores, as transformers keeps them
    rows: list[int]
    tokens: list[int]
    logprobs: list[float]  # of the last token
    stops: list[bool]  # ends the hypothesis (EOS, or the length limit)
    invalid: list[bool] = field(default_factory=list)  # ends at the length limit with a text the grammar refuses
    score_list: list[float] = field(init=False)  # scores as floats

    def __post_init__(self) -> None:
        self.score_list = self.scores.tolist()


class BeamRun:
    """One search; iterate it to advance step by step (yields the current best node)."""

    def __init__(self, search: BeamSearch, start: BeamStart):
        self.search, self.start = search, start
        self.finished = Finished(search.params.num_beams)  # transformers: the finished set
        self.in_beam: list[tuple[float, int]] = []  # keep_slot: finished hypotheses holding a slot (score, node)
        self.records: list[StepRecord] = []
        self.stopped_by = ""
        self.grammar: Grammar | None = None
        prefix = start.ids[len(start.ids) - start.offset:] if start.offset else []
        if search.grammar is not None:  # one matcher per running hypothesis, past the start's prefix
            self.grammar = Grammar(search.grammar, 1)
            for token in prefix:
                self.grammar.advance([0], [token])
        self.clocks: list[Clock] | None = None  # one per running hypothesis, under phases
        if search.plan is not None:
            self.clocks = [replayed(search.plan, prefix, search.lm.piece)]

    # -- the loop ------------------------------------------------------------------------------

    @torch.inference_mode()
    def __iter__(self) -> Iterator[int | None]:
        s, start, p = self.search, self.start, self.search.params
        lm, c = s.lm, s.counters
        out = lm.forward(torch.tensor([start.ids], device=lm.device), last=True)
        c.forward_passes += 1
        c.expanded += 1
        c.expanded_without_pruning += 1
        logits, cache = out.logits[:, -1], out.cache
        parents: list[int | None] = [start.parent]
        scores = torch.tensor([start.score], dtype=torch.float32, device=logits.device)
        for t in range(s.max_total - start.offset):
            raw = logits.log_softmax(-1)  # [b, vocab]
            logprobs, decisions = (raw, None) if self.grammar is None else constrain_rows(self.grammar, raw, False)
            kept, width = self._step(start.offset + t, logprobs, scores, parents, raw, decisions, self._forced())
            yield self._leader(kept)
            if not kept:  # nothing runs on: the length limit, EOS everywhere, or every slot finished
                self.stopped_by = "length" if start.offset + t + 1 >= s.max_total else "all_ended"
                return
            gen_len = start.offset + t + 1
            if not p.keep_slot and p.early is True and self.finished.full:
                self.stopped_by = "early_stopping"
                return
            scores = torch.stack([sc for _, _, _, sc in kept])  # [b'] float32, as transformers keeps them
            if not p.keep_slot and not self._can_improve(scores[:1], gen_len):
                self.stopped_by = "no_improvement"
                return
            if self.grammar is not None:
                self.grammar.advance([row for _, row, _, _ in kept], [tok for _, _, tok, _ in kept])
            if self.clocks is not None:
                self.clocks = [advanced(self.clocks[row], tok, lm.piece) for _, row, tok, _ in kept]
            cache = self._reorder(cache, [row for _, row, _, _ in kept], len(parents))
            parents = [node for node, _, _, _ in kept]
            tokens = torch.tensor([[tok] for _, _, tok, _ in kept], device=lm.device)
            logits = lm.forward(tokens, cache).logits[:, -1]
            c.forward_passes += 1
            c.expanded += len(kept)
            c.expanded_without_pruning += width
        self.stopped_by = "length"

    def _pool(self, step: int, logprobs: torch.Tensor, scores: torch.Tensor) -> Pool:
        s = self.search
        vocab = logprobs.shape[-1]
        total = logprobs + scores[:, None]  # [b, vocab] cumulative scores of every continuation
        pool_scores, flat = total.view(-1).topk(min(s.pool_size, total.numel()))
        finite = torch.isfinite(pool_scores)
        if not bool(finite.all()):  # a grammar (or a cut) leaves fewer continuations than the pool holds
            pool_scores, flat = pool_scores[finite], flat[finite]
        toks, rows = (flat % vocab).tolist(), (flat // vocab).tolist()
        last = step + 1 >= s.max_total
        invalid = [False] * len(toks)
        if last and self.grammar is not None:
            invalid = [not ends_whole(self.grammar, r, tok) for r, tok in zip(rows, toks)]
        return Pool(pool_scores, rows, toks, logprobs.view(-1)[flat].tolist(),
                    [last or tok in s.eos for tok in toks], invalid)

    def _step(self, step: int, logprobs: torch.Tensor, scores: torch.Tensor, parents: list[int | None],
              raw: torch.Tensor | None = None, decisions: list[dict[str, Any]] | None = None,
              forced: dict[int, int] | None = None) -> tuple[list[tuple[int, int, int, torch.Tensor]], int]:
        """Rank the pool, fill the beam by the finishing rule, prune, record the nodes.

        ``forced``: row -> the token the thinking budget forces there (the row's only continuation).
        Returns the new running beam as (node, parent row, token, score) in rank order, and how
        wide it would have been without pruning.
        """
        p = self.search.params
        self.records.append(record_step(parents, scores, logprobs, logprobs if raw is None else raw,
                                        self.search.top_n))
        if decisions is not None:
            self.records[-1].own_stage, self.records[-1].decisions = "grammar", decisions
        forced = forced or {}
        pool = self._pool(step, force_rows(logprobs, forced), scores)
        model = logprobs if raw is None else raw
        views = {row: model_view(model[row], tok) for row, tok in forced.items()}
        slots = self._keep_slot_fill(pool, step) if p.keep_slot else self._transformers_fill(pool)
        active = [j for j, slot in enumerate(slots) if slot == "active"]
        pruned = dict(zip(active, prune([pool.score_list[j] for j in active],
                                        [pool.logprobs[j] for j in active],
                                        [pool.rows[j] for j in active], p.rules)))
        kept = self._add_nodes(step, pool, slots, pruned, parents, views)
        return kept, len(active)

    def _transformers_fill(self, pool: Pool) -> list[str]:
        """transformers' rule: the first k that do not end run on; endings among the pool's first k
        are offered to the finished set. One label per pool candidate."""
        k, out, running = self.search.params.num_beams, [], 0
        for j, stop in enumerate(pool.stops):
            if pool.invalid[j]:
                out.append("invalid")
            elif stop:
                out.append("finish" if j < k else "below_pool")
            else:
                out.append("active" if running < k else "below_beam")
                running += 1
        return out

    def _keep_slot_fill(self, pool: Pool, step: int) -> list[str]:
        """keep_slot: the k best of the finished hypotheses holding a slot and the new continuations,
        by raw score; the older ones first on ties. One label per pool candidate."""
        k = self.search.params.num_beams
        entries = [(score, "held", i) for i, (score, _) in enumerate(self.in_beam)]
        entries += [(score, "new", j) for j, score in enumerate(pool.score_list) if not pool.invalid[j]]
        chosen = {(kind, i) for _, kind, i in sorted(entries, key=lambda e: -e[0])[:k]}
        for i, (_, node) in enumerate(self.in_beam):
            if ("held", i) not in chosen:
                self.search.tree.set_status(node, "fell_off", f"finished, pushed out of the {k} beams at step {step}")
        self.in_beam = [h for i, h in enumerate(self.in_beam) if ("held", i) in chosen]
        return [("finish" if stop else "active") if ("new", j) in chosen else
                ("invalid" if pool.invalid[j] else "below_beam") for j, stop in enumerate(pool.stops)]

    def _add_nodes(self, step: int, pool: Pool, slots: list[str], decisions: dict[int, Any],
                   parents: list[int | None], views: dict[int, dict[str, Any]] | None = None,
                   ) -> list[tuple[int, int, int, torch.Tensor]]:
        """One tree node per pool candidate, with its fate; settles the finished hypotheses.
        ``views``: row -> the model's view of the token the budget forced there."""
        p, tree, record = self.search.params, self.search.tree, self.records[-1]
        k, where = p.num_beams, self.start.tree
        penalised = None if p.keep_slot else (pool.scores / ((step + 1) ** p.length_penalty)).tolist()
        kept: list[tuple[int, int, int, torch.Tensor]] = []
        offers: list[tuple[float, float, int]] = []
        offered: dict[int, tuple[int, int, float]] = {}  # node -> (row, token, logprob)
        for j, (row, tok, lp, sc, slot) in enumerate(zip(pool.rows, pool.tokens, pool.logprobs, pool.score_list,
                                                         slots)):
            args = (parents[row], step, tok, lp, sc)
            if slot == "active":
                dec = decisions[j]
                node = tree.add(*args, dec.status, dec.reason, dec.threshold, j, where)
                if dec.status == "kept":
                    kept.append((node, row, tok, pool.scores[j]))
                    record.enter(row, tok, lp, lp)
            elif slot == "finish":
                extra = {} if penalised is None else {"penalised": penalised[j]}
                node = tree.add(*args, "finished", self._why(tok), None, j, where, **extra)
                if p.keep_slot:
                    self.in_beam.append((sc, node))
                    record.enter(row, tok, lp, lp)
                else:
                    assert penalised is not None  # computed unless keep_slot
                    offers.append((penalised[j], sc, node))
                    offered[node] = (row, tok, lp)
            elif slot == "invalid":
                node = tree.add(*args, "fell_off", "not a whole text of the grammar at the length limit", None, j,
                                where)
            elif slot == "below_pool":  # transformers only finishes endings among the pool's first k
                node = tree.add(*args, "fell_off", f"{self._why(tok)}, ranked below the pool's first {k}", None, j,
                                where)
            else:
                reason = f"{self._why(tok)}, ranked below the {k} beams" if pool.stops[j] else \
                    f"ranked below the {k} beams"
                node = tree.add(*args, "fell_off", reason, None, j, where)
            if views and row in views:
                self.search.views[node] = views[row]
                tree.nodes[node]["forced"] = "budget"
        refused = self._settle(offers, step)
        for node, (row, tok, lp) in offered.items():
            if node not in refused:
                record.enter(row, tok, lp, lp)
        if p.keep_slot:
            self.in_beam.sort(key=lambda h: -h[0])
        return kept

    def _forced(self) -> dict[int, int]:
        """Row -> the token the thinking budget forces there at this step (each row's clock asked once)."""
        cuts = {row: clock.next_forced() for row, clock in enumerate(self.clocks or [])}
        return {row: tok for row, tok in cuts.items() if tok is not None}

    def _leader(self, kept: list[tuple[int, int, int, torch.Tensor]]) -> int | None:
        """The node to show as the current best: the best running hypothesis (keep_slot: the best
        hypothesis in the beam, running or finished)."""
        if self.search.params.keep_slot:
            best = [(float(sc), node) for node, _, _, sc in kept[:1]] + self.in_beam[:1]
            return max(best, key=lambda h: h[0])[1] if best else None
        return kept[0][0] if kept else (self.finished.items[0][2] if self.finished.items else None)

    def _why(self, token_id: int) -> str:
        return "eos" if token_id in self.search.eos else "max_length"

    def _settle(self, offers: list[tuple[float, float, int]], step: int) -> set[int]:
        """Offer the new endings to the finished set; return the nodes it refused."""
        if not offers:
            return set()
        k = self.search.params.num_beams
        pushed, refused = self.finished.offer(offers)
        for node in pushed:
            self.search.tree.set_status(node, "fell_off", f"finished, pushed out of the {k} best at step {step}")
        for node in refused:
            self.search.tree.set_status(node, "fell_off", f"finished below the {k} best finished")
        return set(refused)

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

    # -- results -------------------------------------------------------------------------------

    def results(self) -> list[tuple[float | None, float, int]]:
        """The finished hypotheses, best first: (penalised score or None, raw score, node)."""
        if self.search.params.keep_slot:
            return [(None, score, node) for score, node in self.in_beam]
        return list(self.finished.items)

    def best(self) -> int | None:
        results = self.results()
        return results[0][2] if results else None


def force_rows(logprobs: torch.Tensor, forced: dict[int, int]) -> torch.Tensor:
    """``logprobs`` [b, vocab] with each forced row at -inf but for its forced token, which keeps its
    log-probability (not renormalised: a hypothesis's score stays the model's log-probability of its text)."""
    if not forced:
        return logprobs
    out = logprobs.clone()
    for row, tok in forced.items():
        keep = out[row, tok].clone()
        out[row] = float("-inf")
        out[row, tok] = keep
    return out


def replayed(phases: Plan, tokens: list[int], piece: Any) -> Clock:
    """A clock that has seen ``tokens`` from the start of the text (the budget's forced ones included)."""
    clock = Clock(phases)
    for token in tokens:
        clock = advanced(clock, token, piece, copy=False)
    return clock


def advanced(clock: Clock, token: int, piece: Any, copy: bool = True) -> Clock:
    """The clock of a hypothesis grown by ``token`` (a copy, unless ``copy`` is False)."""
    out = clock.copy() if copy else clock
    out.next_forced()
    out.add(token, piece(token))
    return out


@register("beam", BeamParams,
          "Beam search: k hypotheses in one batch over a reordered KV cache, transformers' finishing rules "
          "or the textbook's, optional Freitag & Al-Onaizan pruning; the whole search tree is traced.",
          family="beam", rows=("num_beams",), draws=Draws(refusal="beam search is deterministic: every seed writes the same text; sample "
                                             "many with stochastic_beam or sample_beam instead"))
def beam(ctx: DecodeContext, params: BeamParams) -> Iterator[Trace]:
    lm = ctx.lm
    started = ctx.clock.now()
    trace = ctx.new_trace("beam", params.to_dict(), ["grammar", "beam"] if ctx.grammar is not None else ["beam"])
    tree = BeamTree(lm.piece, "beam")
    search = BeamSearch(lm, params, tree, ctx.max_new_tokens, ctx.top_n, ctx.grammar, plan(lm, params))
    run = search.run(BeamStart(list(ctx.prompt_ids)))
    extra = beam_section_extra(params)
    if search.plan is not None:
        trace.extra["phases"] = search.plan.record()
    for current in run:
        publish(trace, lm, tree, current, [], search.counters.to_dict(tree), **extra)
        finish(trace, ctx, started, "running", search.counters.forward_passes)
        yield trace
    best = run.best()
    publish(trace, lm, tree, best, finished_records(lm, tree, run.results()),
            search.counters.to_dict(tree), stopped_by=run.stopped_by, **extra)
    trace.steps = best_path_steps(lm, tree, {0: (0, run.records)}, best, len(ctx.prompt_ids), "beam")
    note_phases(trace, search.plan, search.views, lm.piece)
    reason = end_reason(trace, lm, best, ctx.grammar, reached_limit=len(run.records) >= ctx.max_new_tokens)
    record_loops(trace, params, lm.decode)
    finish(trace, ctx, started, reason, search.counters.forward_passes)
    yield trace
