"""Two models reading one text in lockstep, drawn from the lockstep record (playground/whatif/lockstep.py):
per step the KL divergence both ways and the total variation, the steps where their argmax parts marked,
and for a chosen step both distributions side by side. Nothing is recomputed. Pure: no torch, no gradio.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import TOKEN_MARKS, add_caption, prob_brief, show_token
from playground.charts.palette import DRAFT, GUIDE, REJECTED, SELECTED_BAND, TARGET, TEMPLATE


def _name(side: dict[str, Any]) -> str:
    return f"{side['model']} ({side['dtype']})"


def lockstep_figure(record: dict[str, Any], selected: int | None = None) -> go.Figure:
    steps = record["steps"]
    a, b = _name(record["a"]), _name(record["b"])
    x = [s["step"] for s in steps]
    labels = [show_token(s["text"]) for s in steps]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    hover = [[lab, s["argmax_a"]["text"], s["argmax_b"]["text"], s["p_a"] or 0.0, s["p_b"] or 0.0]
             for lab, s in zip(labels, steps)]
    tip = ("step %{x} <b>%{customdata[0]}</b><br>%{y:.4g}<br>argmax A %{customdata[1]} · B %{customdata[2]}"
           "<br>p of the token: A %{customdata[3]:.3g} · B %{customdata[4]:.3g}<extra></extra>")
    fig.add_trace(go.Scatter(x=x, y=[s["kl_ab"] for s in steps], mode="lines+markers", name="KL(A‖B)",
                             line=dict(color=TARGET), customdata=hover, hovertemplate=tip), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=[s["kl_ba"] for s in steps], mode="lines+markers", name="KL(B‖A)",
                             line=dict(color=DRAFT), customdata=hover, hovertemplate=tip), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=[s["tv"] for s in steps], mode="lines", name="total variation",
                             line=dict(color=GUIDE, dash="dot"), hoverinfo="skip"), secondary_y=True)
    parted = [s for s in steps if not s["agree"]]
    fig.add_trace(go.Scatter(x=[s["step"] for s in parted], y=[s["kl_ab"] for s in parted], mode="markers",
                             name="argmax differs", marker=dict(symbol="x", size=12, color=REJECTED),
                             hoverinfo="skip"), secondary_y=False)
    if selected is not None and 0 <= selected < len(steps):
        # a band, not a line: a line in the selection's amber read as a spike of KL(B‖A), drawn in amber too
        fig.add_vrect(x0=selected - 0.4, x1=selected + 0.4, fillcolor=SELECTED_BAND, line_width=0, layer="below",
                      name="selected step")
    summary = record["summary"]
    fig.update_layout(template=TEMPLATE, height=400, margin=dict(t=120, b=110),
                      title=dict(text=f"A {a} against B {b}<br>mean KL(A‖B) {summary['mean_kl_ab']:.3g} nats · "
                                      f"argmax agrees at {summary['agreement']:.0%} of {summary['tokens']} steps"),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left"))
    fig.update_xaxes(tickvals=x, ticktext=labels, tickangle=-45)
    fig.update_yaxes(title_text="KL (nats)", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="total variation", rangemode="tozero", showgrid=False, secondary_y=True)
    largest = ", ".join(f"step {t} ({labels[t]})" for t in summary["largest"][:3])
    add_caption(fig, f"each step: the two models' distributions for the text's next token; KL both ways (left "
                     f"axis), total variation (right); max KL(A‖B) {summary['max_kl_ab']:.3g}; largest at "
                     f"{largest}; top-{summary['top_k']} overlap {summary['mean_overlap']:.2f} on average; "
                     f"{TOKEN_MARKS}")
    return fig


def step_figure(record: dict[str, Any], step: int) -> go.Figure:
    """Both distributions of ``step`` side by side: each model's top tokens and the text's token."""
    s = record["steps"][step]
    cands = s["candidates"]
    labels = [show_token(c["text"]) for c in cands]
    fig = go.Figure()
    for key, colour in (("a", TARGET), ("b", DRAFT)):
        fig.add_trace(go.Bar(x=labels, y=[c[f"p_{key}"] or 0.0 for c in cands], name=f"{key.upper()} "
                             f"{_name(record[key])}", marker_color=colour,
                             hovertemplate="%{x}: p %{y:.4g}<extra>" + key.upper() + "</extra>"))
    fig.update_layout(template=TEMPLATE, barmode="group", height=340, margin=dict(t=90, b=90),
                      title=dict(text=f"Step {step}: the text has <b>{show_token(s['text'])}</b> · "
                                      f"A {prob_brief(s['p_a'] or 0.0)} · B {prob_brief(s['p_b'] or 0.0)} · "
                                      f"KL(A‖B) {s['kl_ab']:.3g}"),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left"),
                      yaxis=dict(title_text="p", rangemode="tozero"))
    fig.update_xaxes(tickangle=-45)
    add_caption(fig, f"each model's most probable tokens at this step and the text's own; argmax A "
                     f"{show_token(s['argmax_a']['text'])}, B {show_token(s['argmax_b']['text'])}; {TOKEN_MARKS}")
    return fig
