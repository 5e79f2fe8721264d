"""Views of a speculative trace: what the draft proposed, what the target kept, and what it bought.

Reads only the trace's JSON form (``rounds`` and the ``speculative`` totals).
Pure: no torch, no gradio. Colours follow the design card: accepted green,
rejected red and struck through, resampled or bonus blue; drafts after the
first rejection (never looked at) grey.
"""
from __future__ import annotations

import html
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.views import View

GREEN, RED, BLUE, GREY = "#16a34a", "#dc2626", "#2563eb", "#94a3b8"
TARGET, DRAFT, RESIDUAL = "#1e40af", "#f59e0b", "#7c3aed"
STYLES = {
    "accepted": "background:#dcfce7;color:#166534",
    "rejected": "background:#fee2e2;color:#991b1b;text-decoration:line-through",
    "skipped": "background:#f1f5f9;color:#94a3b8;text-decoration:line-through",
    "added": "background:#dbeafe;color:#1e3a8a;font-weight:600",
    "unused": "color:#94a3b8",
}


def expected_speedup(alpha: float, gamma: float, c: float, verify_cost: float = 1.0) -> float:
    """Leviathan et al. (2022), eq. 1 / Theorem 3.8: expected wall-clock improvement factor.

    A round yields (1 - alpha^(gamma+1)) / (1 - alpha) tokens on average and costs gamma draft steps
    (c each, in target steps) plus one verification pass. The paper takes that pass to cost one
    target step; ``verify_cost`` is its measured cost in target steps (on a CPU, verifying 8 tokens
    costs about two steps).
    """
    tokens = gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tokens / (gamma * c + verify_cost)


def _esc(text: str) -> str:
    """Model text is untrusted: escape it, and make newlines visible."""
    return html.escape(text, quote=True).replace("\n", "↵")


def _num(x: Any, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def _span(text: str, style: str, title: str) -> str:
    return f'<span style="{STYLES[style]};padding:1px 2px;border-radius:3px" title="{_esc(title)}">{_esc(text)}</span>'


def _draft_title(d: dict[str, Any]) -> str:
    if not d.get("evaluated"):
        return f"drafted {d['text']!r}; never checked: an earlier draft was rejected"
    verdict = "accepted" if d["accepted"] else "rejected"
    draw = f", u = {_num(d.get('u'))}" if d.get("u") is not None else ""
    return (f"{d['text']!r}: target {_num(d['p_target'])}, draft {_num(d['q_draft'])}, "
            f"accept prob {_num(d['accept_prob'])}{draw} -> {verdict}")


def _round_spans(r: dict[str, Any]) -> str:
    spans, kept = [], r.get("committed", r["accepted"] + 1)
    for i, d in enumerate(r["draft"]):
        style = ("accepted" if i < kept else "unused") if d["accepted"] else (
            "rejected" if d["evaluated"] else "skipped")
        spans.append(_span(d["text"], style, _draft_title(d)))
    added = r["resampled"] or r["bonus"]
    if added is not None:
        how = "resampled from the residual" if r["resampled"] else "bonus token from the target"
        title = f"{added['text']!r}: {how}, probability {_num(added.get('prob'))}"
        spans.append(_span(added["text"], "added" if r["accepted"] < kept else "unused", title))
    return "".join(spans)


def timeline_html(trace: dict[str, Any]) -> str:
    """One line per round: accepted, rejected, never-checked drafts and the target's own token."""
    s = trace.get("speculative", {})
    rows = []
    for r in trace["rounds"]:
        label = f"round {r['round']} · γ={r['gamma']} · kept {r['accepted']}/{r['gamma']}"
        rows.append(f'<div style="margin:2px 0;white-space:pre-wrap"><span style="display:inline-block;'
                    f'min-width:13em;color:#475569;font-size:0.85em">{label}</span>{_round_spans(r)}</div>')
    lossy = (' <b style="color:#b91c1c">top-K verification is lossy: the text does not follow the '
             'target\'s distribution.</b>') if s.get("verify") == "topk" else ""
    head = (f'<div style="color:#334155;margin-bottom:6px">draft {_esc(str(s.get("draft", "?")))} · '
            f'verify {_esc(str(s.get("verify", "?")))} · α = {_num(s.get("alpha"))} · '
            f'τ = {_num(s.get("tau"))} tokens per target pass · {s.get("target_forward_passes", "?")} target / '
            f'{s.get("draft_forward_passes", "?")} draft passes{lossy}</div>')
    legend = " ".join(_span(name, style, name) for name, style in (
        ("accepted", "accepted"), ("rejected", "rejected"), ("never checked", "skipped"),
        ("resampled / bonus", "added")))
    return f'<div style="font-family:ui-monospace,monospace">{head}{"".join(rows)}<div>{legend}</div></div>'


def _labels(entries: list[dict[str, Any]]) -> list[str]:
    """Category labels for tokens; two ids can decode to the same text, so repeats get their id."""
    texts = [repr(e["text"]) for e in entries]
    return [f"{t} #{e['id']}" if texts.count(t) > 1 else t for t, e in zip(texts, entries)]


def default_round(trace: dict[str, Any]) -> int:
    """The last round with a rejection, else the last round."""
    rounds = trace["rounds"]
    rejected = [r["round"] for r in rounds if r["resampled"] is not None]
    return rejected[-1] if rejected else rounds[-1]["round"]


def round_figure(trace: dict[str, Any], round_index: int | None = None) -> go.Figure:
    """Target vs draft probability of each drafted token, and the distribution the target's token came from."""
    index = default_round(trace) if round_index is None else round_index
    r = trace["rounds"][index]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], subplot_titles=(
        "drafted tokens: target vs draft probability",
        "residual norm(max(0, target - draft))" if r["resampled"] else "target's distribution (bonus token)"))
    names = [f"{i}: {d['text']!r}" for i, d in enumerate(r["draft"])]
    fig.add_bar(x=names, y=[d["p_target"] for d in r["draft"]], name="target", marker_color=TARGET, row=1, col=1)
    fig.add_bar(x=names, y=[d["q_draft"] for d in r["draft"]], name="draft", marker_color=DRAFT, row=1, col=1)
    checked = [d for d in r["draft"] if d["evaluated"]]
    colors = [GREEN if d["accepted"] else RED for d in checked]
    fig.add_scatter(x=names[:len(checked)], y=[d["accept_prob"] for d in checked], mode="markers",
                    marker=dict(symbol="diamond", size=11, color=colors), name="accept prob", row=1, col=1)
    if any(d.get("u") is not None for d in checked):
        fig.add_scatter(x=names[:len(checked)], y=[d.get("u") for d in checked], mode="markers",
                        marker=dict(symbol="x", size=10, color="#0f172a"), name="uniform draw u", row=1, col=1)
    added = r["resampled"] or r["bonus"]
    res = r["residual_top"]
    labels = _labels(res)
    if r["resampled"]:  # for a bonus token the target's distribution is what it was drawn from
        fig.add_bar(x=labels, y=[e["p_target"] for e in res], name="target", marker_color=TARGET,
                    showlegend=False, opacity=0.45, row=1, col=2)
        fig.add_bar(x=labels, y=[e["q_draft"] for e in res], name="draft", marker_color=DRAFT, showlegend=False,
                    opacity=0.45, row=1, col=2)
    fig.add_bar(x=labels, y=[e["prob"] for e in res], name="drawn from",
                marker_color=[BLUE if added and e["id"] == added["id"] else RESIDUAL for e in res], row=1, col=2)
    how = "resampled" if r["resampled"] else "bonus"
    title = f"round {r['round']}: kept {r['accepted']} of {r['gamma']} drafts"
    if added:
        title += f"; {how} {added['text']!r}"
    fig.update_layout(title=title, barmode="group", yaxis_title="probability", yaxis_range=[0, 1.05])
    return fig


def accepted_lengths_figure(trace: dict[str, Any]) -> go.Figure:
    """How many drafts each round kept; with a fixed gamma, the geometric law Leviathan's formula assumes."""
    # A round with nothing drafted (prompt lookup found no match, or the budget left one token) says
    # nothing about acceptance; it is counted in the title only.
    rounds = [r for r in trace["rounds"] if r["gamma"] > 0]
    idle = len(trace["rounds"]) - len(rounds)
    top = max((r["gamma"] for r in rounds), default=0)
    counts = [sum(1 for r in rounds if r["accepted"] == n) for n in range(top + 1)]
    fig = go.Figure(go.Bar(x=list(range(top + 1)), y=counts, name="rounds", marker_color=GREEN))
    alpha = trace.get("speculative", {}).get("alpha")
    if alpha is not None and rounds:
        # The law for the most common gamma (the last round is often shorter: the budget caps it).
        gammas = [r["gamma"] for r in rounds]
        g = max(set(gammas), key=gammas.count)
        law = [alpha ** n * (1 - alpha) if n < g else alpha ** g for n in range(g + 1)]
        fig.add_scatter(x=list(range(g + 1)), y=[p * gammas.count(g) for p in law], mode="lines+markers",
                        name=f"i.i.d. acceptance α={alpha:.2f}, {gammas.count(g)} rounds of γ={g}",
                        line=dict(color="#0f172a", dash="dot"))
    title = "accepted drafts per round" + (f" ({idle} rounds drafted nothing)" if idle else "")
    fig.update_layout(title=title, xaxis_title="accepted", yaxis_title="rounds", xaxis=dict(dtick=1))
    return fig


def speed_figure(trace: dict[str, Any]) -> go.Figure:
    """Measured wall-clock against plain decoding, and what Leviathan's formula expects at each gamma."""
    s = trace["speculative"]
    base = s["baseline"]
    alpha, c = s.get("alpha"), s.get("c")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65], subplot_titles=(
        "seconds per token (same request)", "speedup vs plain target decoding"))
    n = max(1, base["tokens"])
    fig.add_bar(x=["plain target", "speculative"], y=[base["seconds"] / n, s["seconds"] / n],
                marker_color=[GREY, GREEN if (s["measured_speedup"] or 0) >= 1 else RED], showlegend=False,
                row=1, col=1)
    gammas = list(range(1, 17))
    verify = {int(k): v for k, v in (s.get("verify_cost") or {}).items()}
    if alpha is not None and c is not None:
        fig.add_scatter(x=gammas, y=[expected_speedup(alpha, g, c) for g in gammas], mode="lines",
                        name="Leviathan: verify = 1 step", line=dict(color=TARGET), row=1, col=2)
        measured_v = sorted(k - 1 for k in verify if k > 1)
        fig.add_scatter(x=measured_v, y=[expected_speedup(alpha, g, c, verify[g + 1]) for g in measured_v],
                        mode="markers+lines", name="with measured verify cost", line=dict(color=RESIDUAL, dash="dot"),
                        row=1, col=2)
    if s.get("measured_speedup") is not None:
        fig.add_scatter(x=[s.get("mean_gamma") or 0], y=[s["measured_speedup"]], mode="markers",
                        marker=dict(size=14, symbol="star", color=GREEN), name="measured", row=1, col=2)
    fig.add_hline(y=1.0, line=dict(color=GREY, dash="dash"), row=1, col=2)
    parts = [f"measured {_num(s.get('measured_speedup'))}x", f"α={_num(alpha)}", f"c={_num(c)}",
             f"mean γ={_num(s.get('mean_gamma'))}"]
    vk = verify.get(round(s.get("mean_gamma") or 0) + 1)
    if vk is not None:
        parts.append(f"verify γ+1 = {vk:.2f} steps")
    fig.update_layout(title=" · ".join(parts), yaxis_title="seconds", xaxis2_title="γ (drafts per round)",
                      yaxis2_title="speedup")
    return fig


def views(trace: dict[str, Any], round_index: int | None = None) -> list[View]:
    """Timeline, one round in detail, accepted lengths and speed; [] for a trace without rounds."""
    if not trace.get("rounds"):
        return []
    out = [View("speculative rounds", html=timeline_html(trace)),
           View("round detail", figure=round_figure(trace, round_index)),
           View("accepted per round", figure=accepted_lengths_figure(trace))]
    s = trace.get("speculative") or {}
    if s.get("baseline"):
        out.append(View("speed", figure=speed_figure(trace)))
    else:
        out.append(View("speed", html='<div style="color:#475569">With measure_baseline on, plain target '
                                      'decoding of the same length is timed after the last round and '
                                      'compared here.</div>'))
    return out
