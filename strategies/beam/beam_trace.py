"""The beam family's records and the trace built from them.

A search keeps one ``StepRecord`` per step (``record_step``): each row's top candidates under the
search's own and the model's log-probabilities, and the continuations that won a beam slot. When
the search ends, ``best_path_steps`` turns the records along the best path into ``trace.steps``
(the model's distribution, the search's own where it differs, and the selection), ``publish``
points the trace at a hypothesis and the tree (its ``beam`` section), ``note_phases`` writes each of the
best path's steps' phase (strategies/phases.py), and ``finished_records`` and ``end_reason`` write the
results and why the run ended. Beam search, sample-then-beam and
stochastic beam search all assemble their traces here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.seam import LanguageModel
from playground.trace import Candidate, Stage, Step, Trace
from strategies.beam.beam_params import BeamParams
from strategies.beam.tree import BeamTree, hypothesis_record
from strategies.phases import Clock, Plan, note_view
from strategies.recording import decision_record, entropy
from strategies.sampling.grammar import DEAD_END_REASON, INCOMPLETE_REASON
from strategies.stages import truncates


@dataclass
class StepRecord:
    """What the best path's trace steps need from one step: each row's candidates and what entered the beam."""

    parents: list[int | None]  # node expanded in each row
    scores: list[float]  # each row's cumulative score
    ids: list[list[int]]  # [row] top-n by the search's own log-probabilities, then by the model's
    logprobs: list[list[float]]  # the search's own (tempered, for stochastic beams)
    raw: list[list[float]]  # the model's
    entropy: list[float]
    raw_entropy: list[float]
    with_mass: list[int]  # [row] tokens of the vocabulary with a finite log-probability
    tempered: bool  # the search's log-probabilities differ from the model's
    own_stage: str = "temperature"  # the stage that made them differ ("grammar" under a grammar)
    decisions: list[dict[str, Any]] | None = None  # [row] the grammar's decision, under a grammar
    entered: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    # (row, token) that won a beam slot and was kept or finished -> (own, raw) log-probabilities

    def enter(self, row: int, token: int, logprob: float, raw_logprob: float) -> None:
        self.entered[(row, token)] = (logprob, raw_logprob)


def record_step(parents: list[int | None], scores: torch.Tensor, logprobs: torch.Tensor,
                raw_logprobs: torch.Tensor, top_n: int) -> StepRecord:
    """Each row's top ``top_n`` candidates by the search's and by the model's log-probabilities;
    logprobs and raw_logprobs are [b, vocab]."""
    n = min(top_n, logprobs.shape[-1])
    same = raw_logprobs is logprobs
    idx = logprobs.topk(n, dim=-1).indices
    if not same:
        idx = torch.cat([idx, raw_logprobs.topk(n, dim=-1).indices], dim=-1)
    own, raw = logprobs.gather(1, idx).tolist(), raw_logprobs.gather(1, idx).tolist()
    ids, lps, raws = [], [], []
    for row_ids, row_own, row_raw in zip(idx.tolist(), own, raw):
        first = {t: j for j, t in reversed(list(enumerate(row_ids)))}  # first occurrence of each id
        keep = sorted(first.values())
        ids.append([row_ids[j] for j in keep])
        lps.append([row_own[j] for j in keep])
        raws.append([row_raw[j] for j in keep])
    ent = entropy(logprobs).tolist()
    return StepRecord(list(parents), scores.tolist(), ids, lps, raws, ent,
                      ent if same else entropy(raw_logprobs).tolist(),
                      torch.isfinite(logprobs).sum(-1).tolist(), not same)


# --- trace assembly -----------------------------------------------------------------------------


def best_path_steps(lm: LanguageModel, tree: BeamTree, records: dict[int, tuple[int, list[StepRecord]]],
                    best: int | None, prompt_len: int, selector: str) -> list[Step]:
    """trace.steps for the searched part of the best path: at each step, the candidates of the row the
    winning hypothesis grew from. ``records`` maps a tree index to (offset, its records);
    ``selector`` names the search's selection stage ("beam", "gumbel-top-k").

    A candidate is ``kept`` when it won a beam slot and ran on or finished; every such continuation
    of the row is listed, so the count is the decoder's. ``prob`` is under the search's own
    distribution, ``raw_prob`` under the model's. The stages are the model's distribution, the
    tempered one where the search tempers, and the selection, in which only the continuations that
    entered the beam keep their probability.
    """
    steps: list[Step] = []
    for node_id in tree.path(best):
        node = tree.nodes[node_id]
        if node["status"] == "sampled" or node["tree"] not in records:
            continue
        offset, recs = records[node["tree"]]
        rec = recs[node["step"] - offset]
        row = rec.parents.index(node["parent"])
        ids, lps, raws = list(rec.ids[row]), list(rec.logprobs[row]), list(rec.raw[row])
        entered = {tok: v for (r, tok), v in rec.entered.items() if r == row}
        listed = dict(entered)  # every continuation that entered the beam, and the chosen token
        if node["token_id"] not in entered:
            _, drawn, raw = tree.logprobs(node_id)
            listed[node["token_id"]] = (drawn, raw)
        for tok, (lp, raw) in sorted(listed.items(), key=lambda kv: -kv[1][0]):
            if tok not in ids:
                ids.append(tok)
                lps.append(lp)
                raws.append(raw)
        cands = [Candidate(i, lm.piece(i), math.exp(raw), math.exp(lp), i in entered,
                           {"score": rec.scores[row] + lp}) for i, lp, raw in zip(ids, lps, raws)]
        alive = [True] * len(ids)  # before the selection every listed continuation has a finite logit
        stages = [Stage("raw", [math.exp(r) for r in raws], alive, rec.with_mass[row])]
        if rec.tempered:
            decision = {}
            if rec.decisions is not None:
                decision = decision_record(rec.decisions[row], ids, torch.tensor(ids))
            stages.append(Stage(rec.own_stage, [math.exp(lp) for lp in lps],
                                [math.isfinite(lp) for lp in lps], rec.with_mass[row], decision,
                                truncates(rec.own_stage)))
        stages.append(Stage(selector, [math.exp(lp) if i in entered else 0.0 for i, lp in zip(ids, lps)],
                            [i in entered for i in ids], len(entered)))
        steps.append(Step(prompt_len + node["step"], node["token_id"], cands, stages, entropy=rec.entropy[row],
                          raw_entropy=rec.raw_entropy[row], extra={"beam_node": node_id}))
    return steps


def note_phases(trace: Trace, phases: Plan | None, views: dict[int, dict[str, Any]], piece: Any) -> None:
    """The best path's phases: each step's phase and, where the budget forced its token, the model's view
    of it (``views``: node -> ``model_view``); the trace's ``phases`` record where the answer began and the
    cut, as this path met them. Nothing without phases."""
    if phases is None:
        return
    record = trace.extra["phases"] = phases.record()
    clock = Clock(phases)
    for i, step in enumerate(trace.steps):
        clock.next_forced()
        phase = clock.add(step.chosen, piece(step.chosen))
        note_view(record, step.extra, clock, phase, i, views.get(step.extra.get("beam_node", -1)))


def finished_records(lm: LanguageModel, tree: BeamTree, items: list[tuple[float | None, float, int]]) -> list[dict[str, Any]]:
    eos = lm.eos_ids
    return [hypothesis_record(tree, node, score, pen, lm.decode,
                              eos=tree.nodes[node]["token_id"] in eos) for pen, score, node in items]


def end_reason(trace: Trace, lm: LanguageModel, best: int | None, grammar: Any, reached_limit: bool = True) -> str:
    """Why a search's run ended: its best hypothesis's end, or, under a grammar, that none was whole:
    at the length limit (no whole text within max_new_tokens), or before it, when every hypothesis
    came to a step where the grammar allowed no token (``reached_limit`` False)."""
    if best is None and grammar is not None:
        return INCOMPLETE_REASON if reached_limit else DEAD_END_REASON
    return "eos" if trace.tokens and trace.tokens[-1].id in lm.eos_ids else "length"


def publish(trace: Trace, lm: LanguageModel, tree: BeamTree, best: int | None, finished: list[dict[str, Any]],
            counters: dict[str, Any], **extra: Any) -> None:
    """Point the trace at the current best hypothesis and the tree so far."""
    trace.tokens = tree.tokens(best)
    trace.beam = tree.to_dict(best, finished, counters, **extra)


def beam_section_extra(params: BeamParams) -> dict[str, Any]:
    """The settings the beam views label results with; keep_slot uses neither length rule."""
    if params.keep_slot:
        return {"num_beams": params.num_beams, "finishing": params.finishing, "length_penalty": None,
                "early_stopping": None}
    return {"num_beams": params.num_beams, "finishing": params.finishing, "length_penalty": params.length_penalty,
            "early_stopping": params.early_stopping}
