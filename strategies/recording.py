"""Turning one decoding step's tensors into trace records.

Kept cheap on purpose (it runs once per token): two top-k calls, one softmax
per chain stage, no sort of the whole vocabulary.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from playground.seam import LanguageModel
from playground.trace import Candidate, Stage, Step, Token, Trace, rnd
from strategies.stages import truncates
from strategies.watch import watch_record


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of softmax(logits) along the last axis; -inf logits count as 0."""
    logp = logits.float().log_softmax(dim=-1)
    return entropy_of(logp, logp.exp())


def entropy_of(logp: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The same from log-probabilities and their exp(), for a caller that has both already."""
    return -(p * logp.nan_to_num(neginf=0.0)).sum(-1)


def varentropy_of(logp: torch.Tensor, p: torch.Tensor, ent: torch.Tensor) -> torch.Tensor:
    """The variance of the surprisal -log p under p, in nats^2: sum p (-log p - H)^2 (entropix's
    varentropy); tokens with p = 0 count as 0. ``ent`` is H, the entropy of the same distribution."""
    return (p * (logp.nan_to_num(neginf=0.0) + ent[..., None]) ** 2).sum(-1)


def candidate_ids(raw_probs: torch.Tensor, final_probs: torch.Tensor, chosen: int, top_n: int) -> list[int]:
    """The step's top-n by the model's own probability, the top-n after the chain, and the chosen
    token; ordered by final probability, then raw probability. Inputs are [vocab]."""
    n = min(top_n, raw_probs.shape[-1])
    ids = set(torch.topk(raw_probs, n).indices.tolist())
    if final_probs is not raw_probs:  # a chain that changed nothing passes the same tensor
        ids |= set(torch.topk(final_probs, n).indices.tolist())
    ids.add(int(chosen))
    listed = list(ids)
    idx = torch.tensor(listed, device=raw_probs.device)
    fp, rp = final_probs[idx].tolist(), raw_probs[idx].tolist()
    order = sorted(range(len(listed)), key=lambda i: (-fp[i], -rp[i], listed[i]))
    return [listed[i] for i in order]


def make_step(lm: LanguageModel, position: int, stages: list[torch.Tensor], stage_names: list[str], chosen: int,
              top_n: int, noise: torch.Tensor | None = None,
              decisions: list[dict[str, Any]] | None = None, watch: torch.Tensor | None = None
              ) -> tuple[Step, Token]:
    """``stages`` are [vocab] logits: the raw ones, then after each transform (``stage_names``);
    ``decisions[i]`` is what stage i decided on ``stages[i]`` (one row of a ChainRecord); a stage
    without one records its kept flags only. ``watch``: the ids of a watch-list ([w], strategies/watch.py),
    whose probabilities and ranks the step records under ``watch``."""
    raw, final = stages[0], stages[-1]
    raw_logp = raw.float().log_softmax(-1)
    raw_probs = raw_logp.exp()
    if final is raw:  # no transform: the same numbers, computed once
        final_logp, final_probs = raw_logp, raw_probs
    else:
        final_logp = final.float().log_softmax(-1)
        final_probs = final_logp.exp()
    ids = candidate_ids(raw_probs, final_probs, chosen, top_n)
    idx = torch.tensor(ids, device=raw.device)
    kept = torch.isfinite(final[idx]).tolist()
    rp, fp = raw_probs[idx].tolist(), final_probs[idx].tolist()
    extras: list[dict[str, Any]] = [{} for _ in ids]
    if noise is not None:
        # the noise, the final logit it was added to and their sum, as the selector compared them; a
        # logit the chain cut (-inf) is null, as the trace writes -inf everywhere
        final_at = final[idx]
        for e, g, logit, perturbed in zip(extras, noise[idx].tolist(), final_at.tolist(),
                                          (final_at + noise[idx]).tolist()):
            e["gumbel"] = g
            e["logit"] = logit if math.isfinite(logit) else None
            e["perturbed_logit"] = perturbed if math.isfinite(perturbed) else None
    candidates = [Candidate(i, lm.piece(i), r, f, k, e) for i, r, f, k, e in zip(ids, rp, fp, kept, extras)]
    recorded = []
    if len(stages) > 1:
        names = ["raw", *stage_names]
        made = [{}, *(decisions or [{} for _ in stage_names])]
        for name, logits, decision in zip(names, stages, made):
            alive = torch.isfinite(logits)
            recorded.append(Stage(name, logits.float().softmax(-1)[idx].tolist(), alive[idx].tolist(),
                                  int(alive.sum()), decision_record(decision, ids, idx), truncates(name)))
    final_ent, raw_ent = entropy_of(final_logp, final_probs), entropy_of(raw_logp, raw_probs)
    # per step, for the entropy map: the spread of the surprisal, and how many tokens the chain left
    extra: dict[str, Any] = {"varentropy": rnd(float(varentropy_of(final_logp, final_probs, final_ent))),
                             "raw_varentropy": rnd(float(varentropy_of(raw_logp, raw_probs, raw_ent))),
                             "kept_count": int(torch.isfinite(final).sum())}
    if watch is not None:
        extra["watch"] = watch_record(raw_probs, final_probs, watch)
    step = Step(position=position, chosen=int(chosen), candidates=candidates, stages=recorded,
                entropy=float(final_ent), raw_entropy=float(raw_ent), extra=extra)
    token = Token(int(chosen), lm.piece(int(chosen)), float(final_logp[chosen]), float(raw_logp[chosen]))
    return step, token


def decision_record(decision: dict[str, Any], ids: list[int], idx: torch.Tensor) -> dict[str, Any]:
    """A stage's decision as JSON over the step's candidates: numbers stay numbers (what the stage
    computed rounded, its own settings, the plain numbers, as given so that a threshold of
    0.5000001 stays above 0.5; -inf and NaN as null); a per-token [vocab] float tensor becomes one
    value per candidate; a per-token bool tensor becomes the candidate ids where it is true; a
    per-token [vocab, k] tensor becomes a list of k values per candidate (SynthID's g-values per layer)."""
    out: dict[str, Any] = {}
    for key, value in decision.items():
        if not isinstance(value, torch.Tensor):
            out[key] = (value if math.isfinite(value) else None) if isinstance(value, float) else value
        elif value.dim() == 1 and value.dtype == torch.bool:
            out[key] = [i for i, hit in zip(ids, value[idx].tolist()) if hit]
        elif value.dim() == 1:
            out[key] = [rnd(v) for v in value[idx].tolist()]
        elif value.dim() == 2:
            rows = value[idx].tolist()
            out[key] = [[rnd(v) for v in row] for row in rows] if value.is_floating_point() else rows
        elif value.dtype == torch.bool:
            out[key] = bool(value)
        elif value.is_floating_point():
            out[key] = rnd(float(value))
        else:
            out[key] = int(value)
    return out


def finish(trace: Trace, ctx: Any, started: float, reason: str, target_passes: int) -> Trace:
    """Text, finish reason and timing; ``started`` is a reading of ``ctx.clock`` (decoder time)."""
    trace.text = ctx.lm.decode(trace.token_ids)
    trace.finish_reason = reason
    seconds = ctx.clock.now() - started
    trace.timing.seconds = seconds
    trace.timing.tokens_per_second = len(trace.tokens) / seconds if seconds > 0 else 0.0
    trace.timing.target_forward_passes = target_passes
    return trace
