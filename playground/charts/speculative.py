"""Views of a speculative trace: what the draft proposed, what the target kept, and what it bought.

Reads only the trace's JSON form: ``rounds`` and the ``speculative`` counts for
the decisions, ``timing.speculative`` and ``timing.rounds`` for wall-clock
figures (the expected-speedup curve included: the strategy computes it from its
measured costs with ``strategies.speculative.speedup``, the chart draws the record). Pure:
no torch, no gradio. Colours follow the design card: accepted green, rejected
red and struck through, resampled or bonus blue; drafts after the first
rejection (never looked at) and drafts after the end of the text (discarded)
grey.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts import break_even
from playground.charts.common import TOKEN_MARKS, View, add_caption, escape, show_token, token_text
from playground.charts.palette import (
    ACCEPTED,
    ACCEPTED_BACKGROUND,
    ACCEPTED_INK,
    ADDED,
    ADDED_BACKGROUND,
    ADDED_INK,
    BASELINE,
    DRAFT,
    FASTER,
    GUIDE,
    INK,
    LOSSY_INK,
    RAW,
    REJECTED,
    REJECTED_BACKGROUND,
    REJECTED_INK,
    RESIDUAL,
    SLOW_INK,
    SLOWER,
    SUBDUED_INK,
    TARGET,
    UNUSED,
    UNUSED_BACKGROUND,
    UNUSED_INK,
)

SOURCES = {  # what the target's own token of a round was drawn from
    "residual": "the residual norm(max(0, target - draft))",
    "target": "the target's distribution after the chain",
}
STYLES = {
    "accepted": f"background:{ACCEPTED_BACKGROUND};color:{ACCEPTED_INK}",
    "rejected": f"background:{REJECTED_BACKGROUND};color:{REJECTED_INK};text-decoration:line-through",
    "skipped": f"background:{UNUSED_BACKGROUND};color:{UNUSED_INK};text-decoration:line-through",
    "discarded": f"background:{UNUSED_BACKGROUND};color:{UNUSED_INK};text-decoration:line-through double",
    "added": f"background:{ADDED_BACKGROUND};color:{ADDED_INK};font-weight:600",
}


def _shown(text: str) -> str:
    """Text for the timeline: newlines made visible (the timeline is one line per round), escaped."""
    return escape(text.replace("\n", "↵"))


def _num(x: Any, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


# figures with two titled panels keep their legend under the plot, clear of the panel titles
BELOW = dict(orientation="h", y=-0.2, yanchor="top", x=0, xanchor="left")


def _span(text: str, style: str, title: str) -> str:
    return f'<span style="{STYLES[style]};padding:1px 2px;border-radius:3px" title="{_shown(title)}">{_shown(text)}</span>'


def _draft_title(d: dict[str, Any]) -> str:
    if not d.get("evaluated"):
        return f"drafted {token_text(d['text'])}; never checked: an earlier draft was rejected"
    verdict = "accepted" if d["accepted"] else "rejected"
    if d.get("discarded"):
        verdict = "passed, but discarded: the text had ended before it"
    draw = f", u = {_num(d.get('u'))}" if d.get("u") is not None else ""
    own = (f", target model's own p {_num(d['raw_p_target'])} vs its K-th largest {_num(d['raw_kth'])}"
           if d.get("raw_kth") is not None else "")
    return (f"{token_text(d['text'])}: target {_num(d['p_target'])}, draft {_num(d['q_draft'])}{own}, "
            f"accept prob {_num(d['accept_prob'])}{draw} -> {verdict}")


def _added(r: dict[str, Any]) -> dict[str, Any] | None:
    return r["resampled"] or r["bonus"]


def added_title(r: dict[str, Any]) -> str:
    """The target's token of a round: what it was drawn from, with which probability, and the
    target's own probability of it (they differ after a rejection)."""
    added = _added(r)
    if added is None:
        return "nothing added: the text ended in this round"
    how = "resampled" if r["resampled"] else "bonus"
    return (f"{token_text(added['text'])}: {how}, drawn with p {_num(added['drawn_prob'])} from {SOURCES[r['drawn_from']]}; "
            f"target p {_num(added['p_target'])}")


def _round_spans(r: dict[str, Any]) -> str:
    spans = []
    for d in r["draft"]:
        style = ("discarded" if d.get("discarded") else "accepted") if d["accepted"] else (
            "rejected" if d["evaluated"] else "skipped")
        spans.append(_span(d["text"], style, _draft_title(d)))
    added = _added(r)
    if added is not None:
        spans.append(_span(added["text"], "added", added_title(r)))
    return "".join(spans)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


SLOW_ALPHA = 0.3  # below this acceptance rate a draft rarely pays for itself (Leviathan et al. 2022, fig. 3)
DRAFT_ADVICE = {
    "early_exit": "a deeper draft_layer agrees more often but costs more; prompt lookup suits repetitive text",
    "prompt_lookup": "prompt lookup only finds drafts where the text repeats what came before",
}


def slow_reason(trace: dict[str, Any]) -> str:
    """One line on why a run was not faster than plain decoding, from its recorded figures; "" when
    it was faster, or when nothing says it was slow."""
    s = trace.get("speculative") or {}
    w = (trace.get("timing") or {}).get("speculative") or {}
    alpha, speedup, c = s.get("alpha"), w.get("measured_speedup"), w.get("c")
    slow = speedup is not None and speedup < 1.0
    if alpha is None or not (slow or (speedup is None and alpha < SLOW_ALPHA)):
        return ""
    if alpha < SLOW_ALPHA:
        advice = DRAFT_ADVICE.get(s.get("draft_kind") or s.get("draft") or "", "a draft closer to the target agrees more often")
        return f"α {alpha:.2f}: the {s.get('draft', 'draft')} draft rarely agrees with the target; {advice}."
    if c is not None and c > 0.5:
        return (f"c {c:.2f}: a draft step costs {c:.0%} of a target step here, so drafting eats what the "
                "accepted tokens save.")
    costs = w.get("verify_cost") or {}
    g = str(round(s.get("mean_gamma") or 0) + 1)
    if costs.get(g) is not None and costs[g] > 1.5:
        return (f"verifying {g} tokens in one pass costs {costs[g]:.1f} plain steps on this device, so each "
                "round pays more than its accepted tokens save.")
    return f"measured {speedup:.2f}x: the drafts saved fewer target steps than they cost."


def timeline_html(trace: dict[str, Any]) -> str:
    """One line per round: accepted, rejected, never-checked and discarded drafts and the target's own token."""
    s = trace.get("speculative", {})
    rows = []
    for r in trace["rounds"]:
        label = f"round {r['round']} · γ={r['gamma']} · kept {r['kept']}/{r['gamma']}"
        if r.get("ended"):
            label += " · text ended"
        rows.append(f'<div style="margin:2px 0;white-space:pre-wrap"><span style="display:inline-block;'
                    f'min-width:15em;color:var(--body-text-color-subdued, {SUBDUED_INK});font-size:0.85em">{label}</span>{_round_spans(r)}</div>')
    lossy = (f' <b style="color:{LOSSY_INK}">top-K verification is lossy: the text does not follow the '
             "target's distribution.</b>") if s.get("verify") == "topk" else ""
    head = (f'<div style="color:var(--body-text-color, {INK});margin-bottom:6px">draft {_shown(str(s.get("draft", "?")))} · '
            f'verify {_shown(str(s.get("verify", "?")))} · α = {_num(s.get("alpha"))} · '
            f'τ = {_num(s.get("tau"))} tokens per target pass · {s.get("target_forward_passes", "?")} target / '
            f'{s.get("draft_forward_passes", "?")} draft passes{lossy}</div>')
    why = slow_reason(trace)
    if why:
        head += f'<div style="color:{SLOW_INK};margin-bottom:6px">{_shown(why)}</div>'
    legend = " ".join(_span(name, style, name) for name, style in (
        ("accepted", "accepted"), ("rejected", "rejected"), ("never checked", "skipped"),
        ("discarded (after the end)", "discarded"), ("resampled / bonus", "added")))
    return f'<div style="font-family:ui-monospace,monospace">{head}{"".join(rows)}<div>{legend}</div></div>'


def _labels(entries: list[dict[str, Any]]) -> list[str]:
    """Category labels for tokens; two ids can decode to the same text, so repeats get their id."""
    texts = [show_token(e["text"]) for e in entries]
    return [f"{t} #{e['id']}" if texts.count(t) > 1 else t for t, e in zip(texts, entries)]


def default_round(trace: dict[str, Any]) -> int:
    """The last round with a rejection, else the last round."""
    rounds = trace["rounds"]
    rejected = [r["round"] for r in rounds if r["resampled"] is not None]
    return rejected[-1] if rejected else rounds[-1]["round"]


def round_of_step(trace: dict[str, Any], step: int | None) -> int:
    """The round that produced the token of ``step`` (as its step records); the default round when
    ``step`` is None or out of range."""
    steps = trace.get("steps") or []
    if step is None or not 0 <= step < len(steps) or "speculative" not in steps[step]:
        return default_round(trace)
    return steps[step]["speculative"]["round"]


def _panel_title(r: dict[str, Any]) -> str:
    if _added(r) is None:
        return "nothing drawn: the text ended in this round"
    role = "resampled token" if r["resampled"] else "bonus token"
    if r["verify"] == "topk" and r["resampled"]:
        role = "replacement token"
    return f"drawn from {SOURCES[r['drawn_from']]} ({role})"


def round_figure(trace: dict[str, Any], round_index: int | None = None) -> go.Figure:
    """Target vs draft probability of each drafted token, and the distribution the target's token came from."""
    index = default_round(trace) if round_index is None else round_index
    r = trace["rounds"][index]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], subplot_titles=(
        "drafted tokens: target vs draft probability", _panel_title(r)))
    names = [f"{i}: {show_token(d['text'])}" for i, d in enumerate(r["draft"])]
    fig.add_bar(x=names, y=[d["p_target"] for d in r["draft"]], name="target", marker_color=TARGET, row=1, col=1)
    fig.add_bar(x=names, y=[d["q_draft"] for d in r["draft"]], name="draft", marker_color=DRAFT, row=1, col=1)
    checked = [d for d in r["draft"] if d["evaluated"]]
    if r["verify"] == "topk":  # the test ran on the target model's own distribution, against its K-th largest
        fig.add_bar(x=names, y=[d.get("raw_p_target") for d in r["draft"]], name="target model's own",
                    marker_color=RAW, row=1, col=1)
        fig.add_scatter(x=names[:len(checked)], y=[d.get("raw_kth") for d in checked], mode="markers",
                        marker=dict(symbol="line-ew-open", size=22, color=GUIDE),
                        name=f"K-th largest there (K = {r.get('k')})", row=1, col=1)
    colors = [UNUSED if d.get("discarded") else ACCEPTED if d["accepted"] else REJECTED for d in checked]
    fig.add_scatter(x=names[:len(checked)], y=[d["accept_prob"] for d in checked], mode="markers",
                    marker=dict(symbol="diamond", size=11, color=colors), name="accept prob", row=1, col=1)
    if any(d.get("u") is not None for d in checked):
        fig.add_scatter(x=names[:len(checked)], y=[d.get("u") for d in checked], mode="markers",
                        marker=dict(symbol="x", size=10, color=GUIDE), name="uniform draw u", row=1, col=1)
    added, top = _added(r), r["drawn_top"]
    labels = _labels(top)
    if added is not None:
        fig.add_bar(x=labels, y=[e["drawn_prob"] for e in top], name="drawn from",
                    marker_color=[ADDED if e["id"] == added["id"] else RESIDUAL for e in top], row=1, col=2)
        if r["drawn_from"] == "residual":  # the residual is not the target: draw both (and the draft)
            fig.add_bar(x=labels, y=[e["p_target"] for e in top], name="target", marker_color=TARGET,
                        showlegend=False, opacity=0.45, row=1, col=2)
            fig.add_bar(x=labels, y=[e["q_draft"] for e in top], name="draft", marker_color=DRAFT,
                        showlegend=False, opacity=0.45, row=1, col=2)
    title = f"round {r['round']}: kept {r['kept']} of {r['gamma']} drafts"
    if added is not None:
        how = "resampled" if r["resampled"] else "bonus"
        title += (f"; {how} {show_token(added['text'])}: p {_num(added['drawn_prob'])} in what it was drawn from, "
                  f"target p {_num(added['p_target'])}")
    else:
        title += f"; the text ended at {show_token(trace['tokens'][r['start'] + r['committed'] - 1]['text'])}"
    fig.update_layout(title=title, barmode="group", yaxis_title="probability", yaxis_range=[0, 1.05],
                      legend=BELOW)
    tested = sum(1 for d in r["draft"] if d["evaluated"])
    add_caption(fig, f"left: each drafted token's target p (blue) beside its draft q; diamonds: its accept prob "
                     f"min(1, p/q), green kept ({r['kept']} of {r['gamma']}), red rejected; {tested} tested; right: "
                     f"the distribution the target's token was drawn from · {TOKEN_MARKS}")
    return fig


def accepted_lengths_figure(trace: dict[str, Any]) -> go.Figure:
    """How many drafts each round kept; with a fixed gamma, the geometric law Leviathan's formula assumes."""
    # A round with nothing drafted (prompt lookup found no match, or the budget left one token) says
    # nothing about acceptance; it is counted in the title only.
    rounds = [r for r in trace["rounds"] if r["gamma"] > 0]
    idle = len(trace["rounds"]) - len(rounds)
    top = max((r["gamma"] for r in rounds), default=0)
    counts = [sum(1 for r in rounds if r["kept"] == n) for n in range(top + 1)]
    fig = go.Figure(go.Bar(x=list(range(top + 1)), y=counts, name="rounds", marker_color=ACCEPTED))
    alpha = trace.get("speculative", {}).get("alpha")
    if alpha is not None and rounds:
        # The law for the most common gamma (the last round is often shorter: the budget caps it).
        gammas = [r["gamma"] for r in rounds]
        g = max(set(gammas), key=gammas.count)
        law = [alpha ** n * (1 - alpha) if n < g else alpha ** g for n in range(g + 1)]
        fig.add_scatter(x=list(range(g + 1)), y=[p * gammas.count(g) for p in law], mode="lines+markers",
                        name=f"i.i.d. acceptance α={alpha:.2f}, {gammas.count(g)} rounds of γ={g}",
                        line=dict(color=GUIDE, dash="dot"))
    title = "accepted drafts per round" + (f" ({plural(idle, 'round')} drafted nothing)" if idle else "")
    fig.update_layout(title=title, xaxis_title="accepted", yaxis_title="rounds", xaxis=dict(dtick=1))
    add_caption(fig, f"bars: how many of the {len(rounds)} drafting rounds kept 0, 1, 2... drafts"
                + (f"; dotted: the count if each draft passed on its own with the measured α {_num(alpha, 2)}"
                   if alpha is not None and rounds else ""))
    return fig


def speed_figure(trace: dict[str, Any]) -> go.Figure:
    """Measured wall-clock against plain decoding, and what Leviathan's formula expects at each gamma
    (the curve the strategy recorded from its measured costs)."""
    s, w = trace["speculative"], trace["timing"]["speculative"]
    base = w["baseline"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65], subplot_titles=(
        "seconds per token (same request)", "speedup vs plain target decoding"))
    n = max(1, base["tokens"])
    fig.add_bar(x=["plain target", "speculative"], y=[base["seconds"] / n, w["seconds"] / n],
                marker_color=[BASELINE, FASTER if (w["measured_speedup"] or 0) >= 1 else SLOWER], showlegend=False,
                row=1, col=1)
    curve = w.get("expected_speedup")
    if curve:
        fig.add_scatter(x=curve["gamma"], y=curve["verify_one_step"], mode="lines",
                        name="Leviathan: verify = 1 step", line=dict(color=TARGET), row=1, col=2)
        fig.add_scatter(x=curve["measured_gamma"], y=curve["measured_verify"], mode="markers+lines",
                        name="with measured verify cost", line=dict(color=RESIDUAL, dash="dot"), row=1, col=2)
    if w.get("measured_speedup") is not None:
        fig.add_scatter(x=[s.get("mean_gamma") or 0], y=[w["measured_speedup"]], mode="markers",
                        marker=dict(size=14, symbol="star", color=FASTER), name="measured", row=1, col=2)
    fig.add_hline(y=1.0, line=dict(color=BASELINE, dash="dash"), row=1, col=2)
    parts = [f"measured {_num(w.get('measured_speedup'))}x", f"α={_num(s.get('alpha'))}", f"c={_num(w.get('c'))}",
             f"mean γ={_num(s.get('mean_gamma'))}"]
    vk = (w.get("verify_cost") or {}).get(str(round(s.get("mean_gamma") or 0) + 1))
    if vk is not None:
        parts.append(f"verify γ+1 = {vk:.2f} steps")
    fig.update_layout(title=" · ".join(parts), yaxis_title="seconds", xaxis2_title="γ (drafts per round)", legend=BELOW,
                      yaxis2_title="speedup")
    add_caption(fig, f"left: seconds per token, plain target decoding vs speculative; right: speedup expected at "
                     f"each γ from the measured α {_num(s.get('alpha'), 2)} and cost ratio c {_num(w.get('c'), 2)}, "
                     f"the star the measured {_num(w.get('measured_speedup'), 3)}x; dashed: no speedup")
    return fig


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """Timeline, the round that produced the selected step's token in detail, accepted lengths,
    speed and the break-even lanes; [] for a trace without rounds, and for EAGLE's tree rounds
    (charts_eagle draws those)."""
    if not trace.get("rounds") or (trace.get("speculative") or {}).get("draft_kind") == "eagle":
        return []
    out = [View("speculative rounds", html=timeline_html(trace)),
           View("round detail", figure=round_figure(trace, round_of_step(trace, step))),
           View("accepted per round", figure=accepted_lengths_figure(trace))]
    speed = (trace.get("timing") or {}).get("speculative") or {}
    if speed.get("baseline"):
        out.append(View("speed", figure=speed_figure(trace)))
    else:
        said = (f"{escape(speed['no_baseline'])}." if speed.get("no_baseline") else
                "With measure_baseline on, plain target decoding of the same tokens is timed after the last "
                "round and compared here.")
        out.append(View("speed", html=f'<div style="color:var(--body-text-color-subdued, {SUBDUED_INK})">'
                                      f'{said[0].upper()}{said[1:]}</div>'))
    return out + break_even.views(trace)
