"""The rounds of speculative decoding as the trace holds them.

A ``Round`` is what one round did (the proposal, the target's chain records, the verdict, the
committed tokens and its seconds). ``round_record`` writes it into ``trace.rounds`` (each draft's
probabilities, the test it went through and its fate; the token the target added and the
distribution it was drawn from), ``commit_round`` appends its tokens to the trace as steps (each
naming its round and its source: ``draft``, ``residual`` or ``target``), and ``Tally`` sums the
rounds for ``trace.extra["speculative"]`` and ``trace.timing``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.seam import LanguageModel
from playground.trace import Trace, rnd
from strategies.context import DecodeContext
from strategies.recording import make_step
from strategies.sampling.chain import ChainRecord
from strategies.speculative.drafts import Proposal
from strategies.speculative.speculative_params import SpeculativeParams
from strategies.speculative.verify import Verdict

TOP_PER_TOKEN = 8  # alternatives recorded per drafted token, by target and by draft
TOP_RESIDUAL = 10  # entries of the residual distribution recorded per round


@dataclass
class Round:
    """What one round did. ``target_chain[i]`` is the chain's record at position i of G + 1."""

    proposal: Proposal
    target_chain: list[ChainRecord]
    target_probs: torch.Tensor  # [G + 1, V]
    verdict: Verdict  # batch of one
    committed: list[int]  # accepted drafts, then the resampled or bonus token
    draft_seconds: float
    verify_seconds: float
    ends: tuple[int, str] | None = None  # under a grammar: (how many of ``committed`` the text keeps, why)


# --- the trace of a round ----------------------------------------------------------------------


def _tok(lm: LanguageModel, token_id: int, **fields: float | None) -> dict[str, Any]:
    return {"id": int(token_id), "text": lm.piece(int(token_id)),
            **{k: (None if v is None else rnd(v)) for k, v in fields.items()}}


def _alternatives(lm: LanguageModel, target_row: torch.Tensor, draft_row: torch.Tensor, token: int) -> list[dict[str, Any]]:
    """The top tokens of target and draft at one position, by the larger of the two probabilities."""
    ids = {token}
    for row in (target_row, draft_row):  # only tokens with mass: a one-hot lookup draft adds none
        top = torch.topk(row, min(TOP_PER_TOKEN, row.shape[-1]))
        ids.update(i for i, p in zip(top.indices.tolist(), top.values.tolist()) if p > 0)
    rows = [(i, float(target_row[i]), float(draft_row[i])) for i in ids]
    rows.sort(key=lambda r: (-max(r[1], r[2]), r[0]))
    return [_tok(lm, i, p_target=p, q_draft=q) for i, p, q in rows]


def _drafts(lm: LanguageModel, r: Round, committed: int) -> list[dict[str, Any]]:
    """Each drafted token: its probabilities, the test it went through, and its fate."""
    v, n = r.verdict, int(r.verdict.n_accepted[0])
    lossless = not torch.isnan(v.u).any()
    out = []
    for i, token in enumerate(r.proposal.ids):
        evaluated = i <= n  # drafts after the first rejection were never looked at
        fields = dict(p_target=float(v.p_target[0, i]), q_draft=float(v.q_draft[0, i]),
                      accept_prob=float(v.accept_prob[0, i]) if evaluated else None,
                      u=float(v.u[0, i]) if evaluated and lossless else None)
        if v.raw_p_target is not None and v.raw_kth is not None:  # topk: the test ran on the target's own distribution
            fields.update(raw_p_target=float(v.raw_p_target[0, i]), raw_kth=float(v.raw_kth[0, i]))
        accepted = bool(v.accepted[0, i])
        out.append({**_tok(lm, token, **fields), "accepted": accepted, "evaluated": evaluated,
                    "discarded": accepted and i >= committed,  # passed, but the text had ended before it
                    "top": _alternatives(lm, r.target_probs[i], r.proposal.probs[i], token)})
    return out


def drawn_from(v: Verdict) -> str:
    """The distribution the target's token was drawn from: "residual" or "target" (after the chain)."""
    return "residual" if bool(v.from_residual[0]) else "target"


def round_record(lm: LanguageModel, index: int, start: int, r: Round, committed: int, params: SpeculativeParams
                 ) -> dict[str, Any]:
    """The JSON-ready record of one round (see the trace contract in DESIGN.md).

    ``committed``: how many of the round's tokens made it into the text. Only the end of the text
    cuts a round short (an end-of-text token, or the grammar ending the text; gamma never drafts past
    the budget); what follows is marked discarded: drafts get ``discarded``, and a token drawn after
    it is recorded as neither resampled nor bonus.
    """
    v, g = r.verdict, len(r.proposal.ids)
    n = int(v.n_accepted[0])
    added_in_text = committed > n
    record: dict[str, Any] = {
        "round": index, "start": start, "gamma": g, "accepted": n, "kept": min(n, committed),
        "committed": committed, "ended": committed < len(r.committed), "target_tokens": g + 1,
        "verify": params.verify, "draft": _drafts(lm, r, committed),
        "resampled": None, "bonus": None, "drawn_from": None, "drawn_top": []}
    if params.verify == "topk":
        record["k"] = params.verify_top_k
    if not added_in_text:
        return record
    nxt, next_probs = int(v.next_ids[0]), v.next_probs[0]
    q_row = r.proposal.probs[n] if n < g else None
    top_ids = torch.topk(next_probs, min(TOP_RESIDUAL, next_probs.shape[-1])).indices.tolist()

    def entry(i: int) -> dict[str, Any]:
        return _tok(lm, i, drawn_prob=float(next_probs[i]), p_target=float(r.target_probs[n, i]),
                    q_draft=None if q_row is None else float(q_row[i]))

    record["drawn_from"] = drawn_from(v)
    record["drawn_top"] = [entry(i) for i in top_ids if next_probs[i] > 0]
    record["resampled" if n < g else "bonus"] = entry(nxt)
    return record


def _source(r: Round, i: int) -> tuple[str, float]:
    """Where the round's i-th committed token came from, and its probability there."""
    v, n = r.verdict, int(r.verdict.n_accepted[0])
    if i < n:
        return "draft", float(v.q_draft[0, i])
    return drawn_from(v), float(v.next_probs[0, r.committed[i]])


def commit_round(ctx: DecodeContext, trace: Trace, r: Round, names: list[str]) -> tuple[int, str | None]:
    """Append the round's tokens up to the budget and to where the text ends (the first EOS, or where
    the grammar ends it: ``Round.ends``); (how many, the finish reason when the text ended).

    Each step records the round and the token's source; the token's logprob is under the
    distribution it was drawn from (the draft, the residual or the target's), the step's
    candidates keep the target's.
    """
    lm = ctx.lm
    room = ctx.max_new_tokens - len(trace.tokens)
    keep = len(r.committed) if r.ends is None else r.ends[0]
    for i, token in enumerate(r.committed[:min(room, keep)]):
        stages, decisions = r.target_chain[i].row(0)
        step, tok = make_step(lm, len(ctx.prompt_ids) + len(trace.tokens), stages, names, token, ctx.top_n,
                              decisions=decisions)
        source, drawn = _source(r, i)
        step.extra["speculative"] = {"round": len(trace.rounds or []), "source": source, "drawn_prob": rnd(drawn),
                                     "p_target": rnd(float(r.target_probs[i, token]))}
        tok.logprob = math.log(drawn)
        trace.steps.append(step)
        trace.tokens.append(tok)
        if token in lm.eos_ids:
            return i + 1, "eos"
    return min(room, keep), (r.ends[1] if r.ends is not None and keep <= room else None)


# --- totals over the rounds ------------------------------------------------------------------


@dataclass
class Tally:
    """Running totals over rounds: counts for trace.extra["speculative"], seconds for trace.timing.

    Drafts the text never reached (after an end-of-text token) count nowhere.
    """

    rounds: int = 0
    drafted: int = 0
    evaluated: int = 0
    accepted: int = 0
    produced: int = 0
    gamma_sum: int = 0
    draft_seconds: float = 0.0
    verify_seconds: dict[int, list[float]] = field(default_factory=dict)
    accepted_lengths: list[int] = field(default_factory=list)

    def add(self, r: Round, committed: int) -> None:
        g, n = len(r.proposal.ids), int(r.verdict.n_accepted[0])
        self.rounds += 1
        self.drafted += min(g, committed)
        self.evaluated += min(g, n + 1, committed)
        self.accepted += min(n, committed)
        self.produced += committed
        self.gamma_sum += g
        self.draft_seconds += r.draft_seconds
        self.verify_seconds.setdefault(g + 1, []).append(r.verify_seconds)
        self.accepted_lengths.append(min(n, committed))

    def summary(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "drafted": self.drafted, "evaluated": self.evaluated,
                "accepted": self.accepted, "alpha": _ratio(self.accepted, self.evaluated),
                "acceptance_rate": _ratio(self.accepted, self.drafted),
                "tau": _ratio(self.produced, self.rounds), "mean_gamma": _ratio(self.gamma_sum, self.rounds),
                "accepted_lengths": list(self.accepted_lengths)}

    def seconds(self) -> dict[str, Any]:
        return {"draft_seconds_per_token": _ratio(self.draft_seconds, self.drafted),
                "verify_seconds": {str(k): rnd(sum(v) / len(v)) for k, v in sorted(self.verify_seconds.items())}}


def _ratio(a: float, b: float) -> float | None:
    return rnd(a / b) if b else None
