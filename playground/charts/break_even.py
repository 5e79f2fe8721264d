"""Break-even lanes of a speculative run: did speculation pay, and why.

Draws only what the trace recorded: each round's draft and verify seconds
(``timing.rounds``, written by every draft kind, EAGLE trees included), the tokens each round
kept (``rounds[i].committed``), the run's tau (``speculative.tau``), and the plain decoding
reference the strategy timed after the text (``timing.speculative.baseline``: its
``step_seconds`` is one plain target step, (seconds - prefill) / (tokens - 1)) with the measured
speedup (``timing.speculative.measured_speedup``, the baseline's seconds over the run's).

The figure lays the rounds end to end along one time axis in ms: the draft lane holds each
round's drafting, the verify lane its one target pass, each starting where the round's drafting
ended, so the two lanes together span the rounds' time; the third lane is the time plain decoding
takes to produce the same tokens (each round's kept tokens times the plain step), laid end to end
in the same order. When the plain lane reaches past the rounds, the rounds cost less than plain
decoding would have. Rounds alternate in shade so a round's draft, verify and plain segments can
be told from the next round's.

In plain steps, a round costs (draft + verify) / step: that is the break-even tau, the tokens a
round must keep to be as fast as plain decoding. The run paid when the measured speedup is at
least 1; the sentence names what kept it from paying: a draft too slow (with a free draft the
verify alone would have paid), a verify too slow (a one-step verify would have paid), too few
tokens kept (neither alone would have), or the time outside the rounds (prefill, bookkeeping)
when the rounds themselves paid. Pure: no torch, no gradio.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import View, add_caption, escape
from playground.charts.palette import BASELINE, DRAFT, GUIDE, SUBDUED_INK, TARGET

TITLE = "break-even lanes"
LANES = ("draft", "verify", "plain, same tokens")
SHADES = (1.0, 0.55)  # even and odd rounds


def sig(x: float) -> str:
    """A number for reading, with 2 significant digits (3 from 100 up): 2.14 -> "2.1", 0.0473 ->
    "0.047", 12.6 -> "13", 153.2 -> "153"; never in scientific form from 0.0001 up."""
    a = abs(x)
    if 0 < a < 1 and abs(float(f"{x:.2g}")) >= 1:  # 0.996 rounds to 1: written as 1.0, like any other
        a = x = float(f"{x:.2g}")
    if a >= 10:
        return f"{x:.0f}"
    if a >= 1:
        return f"{x:.1f}"
    if a == 0:
        return "0"
    return f"{x:.2g}" if a >= 1e-4 else f"{x:.1e}"


def speedup_text(x: float) -> str:
    """A measured speedup for reading: 3 significant digits, so 0.996 does not read as 1.0."""
    return f"{x:.3g}"


@dataclass
class Costs:
    """A run's recorded costs, in seconds, and what they come to in plain steps."""

    draft: list[float]  # each round's drafting
    verify: list[float]  # each round's verify pass
    kept: list[int]  # tokens each round committed
    step: float  # one plain target step (the baseline's step_seconds)
    tau: float  # the recorded tokens per round
    verified: float | None  # mean tokens a verify pass fed the target (None when the rounds do not say)
    speedup: float | None  # the recorded measured speedup
    seconds: float | None  # the run's seconds, prefill included
    plain_seconds: float | None  # the baseline's seconds, prefill included
    plain_prefill: float | None  # the baseline's prefill seconds

    @property
    def rounds(self) -> int:
        return len(self.draft)

    @property
    def draft_steps(self) -> float:
        """A round's mean drafting in plain steps."""
        return sum(self.draft) / self.rounds / self.step

    @property
    def verify_steps(self) -> float:
        """A round's mean verify pass in plain steps."""
        return sum(self.verify) / self.rounds / self.step

    @property
    def break_even(self) -> float:
        """A round's mean cost in plain steps: the tau at which speculation is as fast as plain decoding."""
        return self.draft_steps + self.verify_steps


def _verified(rounds: list[dict[str, Any]]) -> float | None:
    """Mean tokens a round's verify pass fed the target: a chain round's ``target_tokens`` (its drafts
    and the last committed token), an EAGLE round's tree (its ``drafted`` nodes and the root)."""
    sizes = [r["target_tokens"] if "target_tokens" in r else r["drafted"] + 1 if "drafted" in r else None
             for r in rounds]
    return None if not sizes or None in sizes else sum(s for s in sizes if s is not None) / len(sizes)


def costs(trace: dict[str, Any]) -> Costs | str:
    """The recorded costs of ``trace``, or one plain sentence on why they are not there."""
    timing = trace.get("timing")
    rounds = trace.get("rounds") or []
    if not timing:
        return "This trace carries no timing, so nothing says whether speculation paid."
    per_round = timing.get("rounds")
    if not per_round or len(per_round) != len(rounds) or any(
            r.get("draft") is None or r.get("verify") is None for r in per_round):
        return "This trace has no draft and verify time for each round, so nothing says whether speculation paid."
    spent = (f"Drafting took {sig(1000 * sum(r['draft'] for r in per_round))} ms and verifying "
             f"{sig(1000 * sum(r['verify'] for r in per_round))} ms over {len(per_round)} "
             f"round{'' if len(per_round) == 1 else 's'}")
    w = timing.get("speculative") or {}
    base = w.get("baseline")
    if not base:
        if w.get("no_baseline"):  # the run recorded why it has none
            why = f"{w['no_baseline']}, so nothing says whether this run paid"
        elif trace.get("finish_reason") == "running":
            why = "plain decoding of the same tokens is timed after the last round"
        elif (trace.get("params") or {}).get("measure_baseline") is False:
            why = "plain decoding was not measured (measure_baseline is off), so nothing says whether this run paid"
        else:
            why = "plain decoding was not measured, so nothing says whether this run paid"
        return f"{spent}; {why}."
    step = base.get("step_seconds")
    if not step or step <= 0:
        return (f"{spent}; the plain run made {base.get('tokens', '?')} token(s), too few to time one plain step, "
                "so nothing says whether this run paid.")
    tau = (trace.get("speculative") or {}).get("tau")
    if tau is None:
        return f"{spent}; the trace records no tokens per round (tau), so nothing says whether this run paid."
    return Costs(draft=[r["draft"] for r in per_round], verify=[r["verify"] for r in per_round],
                 kept=[r["committed"] for r in rounds], step=step, tau=tau, verified=_verified(rounds),
                 speedup=w.get("measured_speedup"), seconds=w.get("seconds"), plain_seconds=base.get("seconds"),
                 plain_prefill=base.get("prefill_seconds"))


def _reason(c: Costs) -> str:
    """Why the rounds did not pay, from a round's costs in plain steps against tau."""
    d, v, tau = c.draft_steps, c.verify_steps, c.tau
    free_draft, one_step_verify = tau > v, tau > d + 1
    if free_draft and (not one_step_verify or d >= v - 1):
        return (f"the draft is too slow: drafting took {sig(d)} plain steps a round, and with a free draft the "
                f"verify's {sig(v)} would have paid")
    if one_step_verify:
        return (f"the verify is too slow: one verify pass cost {sig(v)} plain steps, and at 1 step the round "
                "would have paid")
    return (f"too few accepted: {sig(tau)} tokens a round would pay neither for the draft with a one-step verify "
            f"({sig(d + 1)}) nor for the verify with a free draft ({sig(v)})")


def auto_note(trace: dict[str, Any]) -> str:
    """What the ``auto`` tree chose and expected (the speedup from the pass costs under ``timing``), and
    the one-off time it spent measuring them (kept out of the run's seconds); empty for any other draft."""
    choice = (trace.get("speculative") or {}).get("auto_tree")
    if not choice:
        return ""
    figures = ((trace.get("timing") or {}).get("speculative") or {}).get("auto_tree") or {}
    expected = f"expected tau {sig(choice['expected_tau'])}"
    if figures.get("expected_speedup") is not None:
        expected += f", {speedup_text(figures['expected_speedup'])}x"
    verb = "took" if figures.get("tree_from") == "the request" else "chose"
    note = f"; the auto tree {verb} depth {choice['depth']}, branching {choice['branching']} ({expected})"
    if verb == "took":
        note += " from the request, without measuring"
    if figures.get("costs_seconds"):
        note += (f" after measuring this machine's pass costs in {sig(figures['costs_seconds'])} s, once per model "
                 "and weights, not counted in the run")
    return note


def sentence(trace: dict[str, Any]) -> str:
    """Whether this run paid and why, in one sentence: a round's cost in plain steps, tau, the
    break-even tau, then the verdict (from the measured speedup) with its main reason, and what an
    ``auto`` tree chose."""
    c = costs(trace)
    if isinstance(c, str):
        return c
    return _verdict(trace, c) + auto_note(trace) + gap_note(trace)


def gap_note(trace: dict[str, Any]) -> str:
    """When this CPU scores several tokens in one pass differently from one at a time (the weights
    check's ``one_pass_gap``), that the text can part from plain decoding's; empty when bit-exact."""
    gap = (trace.get("weights_check") or {}).get("one_pass_gap") or 0.0
    if not gap:
        return ""
    return (f"; on this CPU a pass of several tokens differs from one token at a time by up to {gap:.2g} in a "
            "logit, so at a near tie this text can part from plain decoding's")


def _verdict(trace: dict[str, Any], c: Costs) -> str:
    what = f"drafting and verifying {sig(c.verified)} tokens" if c.verified is not None else "a round"
    head = (f"{what} cost {sig(c.break_even)} plain steps a round (draft {sig(c.draft_steps)}, verify "
            f"{sig(c.verify_steps)}); {sig(c.tau)} kept per round; the break-even is {sig(c.break_even)}")
    rounds_pay = c.tau > c.break_even
    if c.speedup is None:
        return f"{head}; no measured speedup was recorded, so nothing says whether this run paid"
    if c.speedup >= 1:
        verdict = f"this run paid ({speedup_text(c.speedup)}x)"
        if not rounds_pay:
            verdict += ", though its rounds cost more than the tokens they kept: the time outside the rounds won it"
        return f"{head}; {verdict}"
    verdict = f"this run did not pay ({speedup_text(c.speedup)}x): "
    if rounds_pay:
        outside = (c.seconds or 0) - sum(c.draft) - sum(c.verify)
        plain = (f", against plain decoding's {sig(1000 * c.plain_prefill)} ms prefill"
                 if c.plain_prefill is not None else "")
        verdict += (f"its rounds paid, but the time outside them (prefill, bookkeeping: {sig(1000 * outside)} ms "
                    f"of the run's {sig(1000 * (c.seconds or 0))} ms{plain}) cost more than they saved")
    else:
        verdict += _reason(c)
    return f"{head}; {verdict}"


def figure(trace: dict[str, Any]) -> go.Figure:
    """The draft and verify lanes of the rounds, end to end in ms, against the plain lane (the same
    tokens at the plain step); the caption is ``sentence``. Only for a trace ``costs`` reads."""
    c = costs(trace)
    if isinstance(c, str):
        raise ValueError(c)
    ms = 1000.0
    starts, t = [], 0.0
    for d, v in zip(c.draft, c.verify):
        starts.append(t)
        t += d + v
    plain_starts, p = [], 0.0
    for k in c.kept:
        plain_starts.append(p)
        p += k * c.step
    shade = [SHADES[i % 2] for i in range(c.rounds)]
    fig = go.Figure()
    fig.add_bar(y=[LANES[0]] * c.rounds, x=[d * ms for d in c.draft], base=[s * ms for s in starts],
                orientation="h", name="draft", marker=dict(color=DRAFT, opacity=shade),
                hovertext=[f"round {i}: drafting {sig(d * ms)} ms" for i, d in enumerate(c.draft)],
                hoverinfo="text")
    fig.add_bar(y=[LANES[1]] * c.rounds, x=[v * ms for v in c.verify],
                base=[(s + d) * ms for s, d in zip(starts, c.draft)], orientation="h", name="verify",
                marker=dict(color=TARGET, opacity=shade),
                hovertext=[f"round {i}: one verify pass {sig(v * ms)} ms" for i, v in enumerate(c.verify)],
                hoverinfo="text")
    fig.add_bar(y=[LANES[2]] * c.rounds, x=[k * c.step * ms for k in c.kept], base=[s * ms for s in plain_starts],
                orientation="h", name="plain decoding", marker=dict(color=BASELINE, opacity=shade),
                hovertext=[f"round {i} kept {k} token{'' if k == 1 else 's'}: plain decoding "
                           f"{sig(k * c.step * ms)} ms at {sig(c.step * ms)} ms a token" for i, k in enumerate(c.kept)],
                hoverinfo="text")
    fig.add_vline(x=t * ms, line=dict(color=GUIDE, dash="dash"))
    verdict = ("no measured speedup" if c.speedup is None else
               f"{'paid' if c.speedup >= 1 else 'did not pay'}: {speedup_text(c.speedup)}x")
    fig.update_layout(title=f"a round cost {sig(c.break_even)} plain steps, kept {sig(c.tau)} tokens · {verdict}",
                      barmode="overlay", showlegend=False, height=330,
                      xaxis=dict(title=f"ms, {c.rounds} round{'' if c.rounds == 1 else 's'} · plain step "
                                       f"{sig(c.step * ms)} ms", rangemode="tozero"),
                      yaxis=dict(categoryorder="array", categoryarray=list(reversed(LANES))))
    add_caption(fig, sentence(trace))
    return fig


def message_html(text: str) -> str:
    return f'<div style="color:var(--body-text-color-subdued, {SUBDUED_INK})">{escape(text)}</div>'


def views(trace: dict[str, Any]) -> list[View]:
    """The break-even lanes of a speculative run (any draft kind), or one plain sentence on why they
    cannot be drawn; [] for a trace without rounds."""
    if not trace.get("rounds") or "speculative" not in trace:
        return []
    c = costs(trace)
    if isinstance(c, str):
        return [View(TITLE, html=message_html(c))]
    return [View(TITLE, figure=figure(trace))]
