"""The logit lens at a step: what each layer would have chosen, drawn from the step's lens record.

Left, a heat map: one row per layer (0, the embeddings, at the bottom; the last, the model's own
distribution, at the top), one column per token the last layer ranks highest (and the chosen token
when it is not among them), each cell that layer's probability of that token (colour on a log scale, from 1e-5). Right, the chosen
token's rank at every layer (log scale: 1 is the top), with the first layer where it tops the row.
Every number is the record's (``strategies.lens``, made by ``playground.whatif.lens``); nothing is
recomputed here. Pure: no torch, no gradio.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import TOKEN_MARKS, View, add_caption, prob_brief, show_token
from playground.charts.palette import CHOSEN, TEMPLATE

COLORSCALE = "Viridis"
FLOOR = -5  # the colour scale's lowest decade: a probability under 1e-5 is drawn as 1e-5


def decade(p: float | None) -> float:
    """log10 of a recorded probability, at least FLOOR (the early layers' probabilities span decades)."""
    return FLOOR if not p or p <= 0 else max(FLOOR, math.log10(p))


def lens_at(trace: dict[str, Any], step: int | None) -> dict[str, Any] | None:
    """The lens record of ``step`` that ``trace`` carries (``trace["lens"]``: records of the steps read)."""
    return next((r for r in trace.get("lens") or [] if r.get("step") == step), None)


def lens_figure(record: dict[str, Any]) -> go.Figure:
    rows, cols = record["rows"], record["columns"]
    chosen = record["chosen"]
    labels = [show_token(c["text"]) for c in cols]
    layers = [r["layer"] for r in rows]
    last = layers[-1]
    names = ["embeddings" if k == 0 else f"layer {k}" for k in layers]
    hover = [[f"{names[i]}: <b>{labels[j]}</b> p {prob_brief(p or 0.0)}<br>this layer's top: "
              f"{show_token(rows[i]['top'][0]['text'])} ({prob_brief(rows[i]['top'][0]['prob'] or 0.0)})"
              for j, p in enumerate(r["probs"])] for i, r in enumerate(rows)]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, column_widths=[0.74, 0.26], horizontal_spacing=0.03)
    fig.add_trace(go.Heatmap(
        z=[[decade(p) for p in r["probs"]] for r in rows], x=list(range(len(cols))), y=layers, zmin=FLOOR, zmax=0,
        colorscale=COLORSCALE, name="probability", text=hover, hoverinfo="text",
        colorbar=dict(title=dict(text="p"), len=0.8, thickness=12, tickvals=list(range(FLOOR, 1)),
                      ticktext=[f"1e{k}" if k else "1" for k in range(FLOOR, 1)])), row=1, col=1)
    j = next(i for i, c in enumerate(cols) if c["id"] == chosen["id"])
    fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=-0.5, y1=last + 0.5, line=dict(color=CHOSEN, width=3),
                  row=1, col=1)
    fig.add_trace(go.Scatter(
        x=[r["chosen_rank"] for r in rows], y=layers, mode="lines+markers", name="rank of the chosen token",
        line=dict(color=CHOSEN), marker=dict(size=6, color=CHOSEN),
        customdata=[[names[i], r["chosen_prob"] or 0.0] for i, r in enumerate(rows)],
        hovertemplate="%{customdata[0]}: rank %{x:,}, p %{customdata[1]:.3g}<extra></extra>", showlegend=False),
        row=1, col=2)
    first = record.get("first_top_layer")
    if first is not None:
        fig.add_hline(y=first, line=dict(color=CHOSEN, dash="dot", width=1), row=1, col=2)
    fig.update_xaxes(tickvals=list(range(len(cols))), ticktext=labels, tickangle=-45, row=1, col=1)
    worst = max(r["chosen_rank"] for r in rows)
    ticks = [10 ** k for k in range(len(str(worst)) + 1)]
    fig.update_xaxes(type="log", title_text="rank (1 = top)", autorange="reversed", tickvals=ticks,
                     ticktext=[f"{t:,}" for t in ticks], row=1, col=2)
    fig.update_yaxes(title_text="layer (0 = embeddings)", row=1, col=1)
    where = (f"it first tops a layer at {names[first]}" if first is not None
             else "no layer ranks it first")
    fig.update_layout(template=TEMPLATE, height=max(360, 14 * len(rows) + 200), margin=dict(t=80, b=90),
                      title=dict(text=f"Logit lens at step {record['step']}: <b>{labels[j]}</b>, {where}"))
    add_caption(fig, f"each layer's hidden state read through the final norm and the LM head (the top row is the "
                     f"model's own distribution; early rows are rough: they were never trained to be read); columns: "
                     f"the top row's {record['top_columns']} most probable tokens"
                     f"{'' if len(cols) == record['top_columns'] else ' and the chosen one'} (outlined); right: the chosen token's rank per layer; {TOKEN_MARKS}")
    return fig


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    record = lens_at(trace, step)
    return [View("Logit lens", lens_figure(record))] if record is not None else []
