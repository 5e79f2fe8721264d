"""The ``speculative`` strategy with ``draft='eagle'``: tree rounds, their records and totals.

Each round records its whole draft tree (``tree``: per node its token, parent, depth, the draft's
probability q_draft and the target's p_target of it under the parent's rows, the cumulative draft
score, whether it was tested, its acceptance probability and uniform, and its fate: ``accepted``
on the path, ``rejected`` when tested and refused, ``unreached`` below a rejected node), the
accepted path, the token the target added and where it was drawn from, and the round's tau (tokens
it committed). Wall-clock figures live under ``timing``.
"""
from __future__ import annotations

import math
import time
from typing import Any, Iterator

import torch

from playground.seam import LanguageModel
from playground.trace import Trace, rnd
from strategies.context import DecodeContext, OutOfTime
from strategies.loops import record_loops
from strategies.recording import finish, make_step
from strategies.speculative.baseline import STOPPED
from strategies.speculative.baseline import reference as plain_reference
from strategies.speculative.eagle.auto_tree import MEASURING, auto_tree, costs_pending, tree_text
from strategies.speculative.eagle.decoder import EagleDecoder, TreeRound, check_eagle
from strategies.speculative.eagle.head import load_head
from strategies.speculative.eagle.tree import depths


def _fate(v: Any, i: int) -> str:
    if i in v.path:
        return "accepted"
    return "rejected" if v.evaluated[i] else "unreached"


def tree_record(lm: LanguageModel, index: int, start: int, r: TreeRound, committed: int) -> dict[str, Any]:
    """The JSON-ready record of one tree round; ``committed`` is how many of its tokens entered the text."""
    t, v = r.tree, r.verdict
    dep = depths(t.parents)
    nodes = [{"node": i, "parent": t.parents[i], "depth": dep[i], "id": t.tokens[i], "text": lm.piece(t.tokens[i]),
              "q_draft": rnd(v.q_draft[i]) if i else None, "p_target": rnd(v.p_target[i]) if i else None,
              "score": rnd(t.scores[i]), "evaluated": v.evaluated[i],
              "accept_prob": _rnd_or_none(v.accept_prob[i]), "u": _rnd_or_none(v.u[i]), "fate": "root" if i == 0 else _fate(v, i)}
             for i in range(len(t.parents))]
    last = v.path[-1] if v.path else 0
    nxt = v.next_id
    return {"round": index, "start": start, "tree": nodes, "path": [0] + v.path, "accepted": len(v.path),
            "drafted": len(t.parents) - 1, "committed": committed, "ended": committed < len(r.committed),
            "tau": committed, "head_passes": t.head_passes,
            "next": {"id": nxt, "text": lm.piece(nxt), "after_node": last, "drawn_prob": rnd(float(v.next_probs[nxt])),
                     "p_target": rnd(float(r.target_probs[last, nxt])),
                     "drawn_from": "residual" if v.from_residual else "target",
                     "kind": "bonus" if not any(c for c in _children_of(t.parents, last)) else "resampled"}}


def _rnd_or_none(x: float | None) -> float | None:
    return None if x is None else rnd(x)


def _children_of(parents: list[int], node: int) -> list[int]:
    return [i for i, p in enumerate(parents) if p == node and i]


def _commit(ctx: DecodeContext, trace: Trace, r: TreeRound, names: list[str]) -> tuple[int, bool]:
    """Append the round's tokens (up to the budget and the first EOS); (how many, hit EOS)."""
    lm, v = ctx.lm, r.verdict
    assert trace.rounds is not None  # set up by the strategy
    nodes = [0] + v.path  # committed token i is decided at node nodes[i]
    room = ctx.max_new_tokens - len(trace.tokens)
    for i, token in enumerate(r.committed[:room]):
        node = nodes[i]
        stages, decisions = r.target_chain[node].row(0)
        step, tok = make_step(lm, len(ctx.prompt_ids) + len(trace.tokens), stages, names, token, ctx.top_n,
                              decisions=decisions)
        if i < len(v.path):
            source, drawn = "draft", v.q_draft[v.path[i]]
        else:
            source, drawn = ("residual" if v.from_residual else "target"), float(v.next_probs[token])
        step.extra["speculative"] = {"round": len(trace.rounds), "source": source, "node": node,
                                     "drawn_prob": rnd(drawn), "p_target": rnd(float(r.target_probs[node, token]))}
        tok.logprob = math.log(drawn) if drawn > 0 else float("-inf")
        trace.steps.append(step)
        trace.tokens.append(tok)
        if token in lm.eos_ids:
            return i + 1, True
    return min(room, len(r.committed)), False


def eagle_rounds(ctx: DecodeContext, params: Any, trace: Trace, chain: list, names: list[str]) -> Iterator[Trace]:
    """Run the tree rounds into ``trace`` (set up by the strategy), yielding after each; then the
    wall-clock reference (``baseline.reference``), also when the time budget cut the rounds."""
    greedy = params.temperature == 0
    check_eagle(ctx.lm, greedy, params.eagle_tree)
    auto = params.eagle_tree == "auto"
    decoder = EagleDecoder(ctx.lm, chain, greedy, "static" if auto else params.eagle_tree, params.eagle_depth,
                           params.eagle_branching, params.eagle_total_tokens, ctx.generator(1), ctx.generator(0),
                           list(ctx.prompt_ids), ctx.clock.now, vocab=params.eagle_vocab)
    started = ctx.clock.now()
    with torch.inference_mode():
        decoder.prefill()
    choice = figures = None
    if auto:  # measuring the pass costs is a one-off per model and weights, like loading: neither the run's
        # time nor its budget's; the page's status line says so while it runs, its progress line how far
        announced = ctx.announcement(trace, MEASURING) if costs_pending(decoder, params.eagle_auto_tree) else None
        if announced is not None:
            yield announced
        before = time.perf_counter()
        with ctx.clock.held():
            choice, figures = auto_tree(decoder, load_head(ctx.lm)[1], params.eagle_auto_tree, ctx.report)
        figures["costs_seconds"] = rnd(time.perf_counter() - before if figures["costs_measured_now"] else 0.0)
        # the tree this run used, as a parameter: a request or link with the trace's params replays it
        trace.params["eagle_auto_tree"] = tree_text(decoder.depth, decoder.branching)
    reason, produced, rounds, accepted, draft_s, verify_s = "length", 0, 0, 0, 0.0, 0.0
    taus: list[int] = []
    records = trace.rounds
    assert records is not None  # set up by the strategy

    def totals(reference: dict[str, Any] | None, no_baseline: str | None = None) -> None:
        _totals(trace, decoder, params, rounds, produced, accepted, taus, draft_s, verify_s, reference, choice,
                figures, no_baseline)

    def measured() -> None:
        """Plain decoding of the tokens the run made, off its clock, into the totals (or why there is none)."""
        totals(*plain_reference(ctx, params.measure_baseline, trace.token_ids, chain))

    try:
        while len(trace.tokens) < ctx.max_new_tokens:
            with torch.inference_mode():
                r = decoder.step()
            start = len(trace.tokens)
            committed, eos = _commit(ctx, trace, r, names)
            records.append(tree_record(ctx.lm, len(records), start, r, committed))
            trace.timing.extra["rounds"].append({"draft": rnd(r.draft_seconds), "verify": rnd(r.verify_seconds)})
            rounds, produced = rounds + 1, produced + committed
            accepted += min(len(r.verdict.path), committed)
            draft_s, verify_s = draft_s + r.draft_seconds, verify_s + r.verify_seconds
            taus.append(committed)
            finish(trace, ctx, started, "running", decoder.target_passes)
            totals(None)
            if eos:
                reason = "eos"
                break
            yield trace
    except OutOfTime:  # the time budget cut the rounds: the reference still runs
        measured()
        yield trace
        return
    except GeneratorExit:  # Stop: the page keeps this trace as it is
        totals(None, STOPPED)
        raise
    record_loops(trace, params, ctx.lm.decode)
    finish(trace, ctx, started, reason, decoder.target_passes)
    measured()
    yield trace


def _totals(trace: Trace, decoder: EagleDecoder, params: Any, rounds: int, produced: int, accepted: int,
            taus: list[int], draft_s: float, verify_s: float, reference: dict[str, Any] | None,
            choice: dict[str, Any] | None, figures: dict[str, Any] | None, no_baseline: str | None = None) -> None:
    """The run's totals into ``trace``: counts under ``speculative``, seconds (and what ``auto`` measured,
    ``figures``; with ``no_baseline``, why the plain reference is missing) under ``timing``."""
    trace.extra["speculative"] = {
        "draft": "eagle", "draft_kind": "eagle", "verify": "greedy" if decoder.greedy else "tree_rejection",
        "tree": params.eagle_tree, "depth": decoder.depth, "branching": decoder.branching,
        "auto_tree": choice, "draft_vocab": decoder.vocab_label,
        "total_tokens": params.eagle_total_tokens if params.eagle_tree == "dynamic" else None,
        "target_forward_passes": decoder.target_passes, "draft_forward_passes": decoder.head_passes,
        "verify_passes": rounds, "rounds": rounds, "accepted": accepted,
        "tau": rnd(produced / rounds) if rounds else None, "taus": list(taus)}
    seconds = trace.timing.seconds
    speed: dict[str, Any] = {"seconds": rnd(seconds), "draft_seconds": rnd(draft_s), "verify_seconds": rnd(verify_s),
                             "baseline": reference, "measured_speedup": None, "auto_tree": figures}
    if reference and reference.get("seconds") and seconds:
        speed["measured_speedup"] = rnd(reference["seconds"] / seconds)
    if no_baseline:
        speed["no_baseline"] = no_baseline
    trace.timing.extra["draft_forward_passes"] = decoder.head_passes
    trace.timing.extra["speculative"] = speed
