"""The overview of a run: the chosen token's probability and the entropy at every step, and the step
the model was least sure of. Pure: no torch, no gradio.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import add_caption, as_prob, num, show_token
from playground.charts.palette import CHOSEN, ENTROPY, TEMPLATE
from playground.charts.phases import shade_phases
from playground.charts.text import prob_color


def overview_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure:
    """Per step: the chosen token's model probability (bars, coloured like the text) and the entropy
    of the model's distribution and of the distribution sampled from (right axis, nats).
    ``selected`` is shaded; clicking a bar selects its step in the page."""
    tokens = trace.get("tokens") or []
    steps = trace.get("steps") or []
    n = len(tokens)
    x = list(range(n))
    p_raw = [math.exp(t["raw_logprob"]) if t.get("raw_logprob") is not None else 0.0 for t in tokens]
    p_final = [math.exp(t["logprob"]) if t.get("logprob") is not None else 0.0 for t in tokens]
    labels = [show_token(t["text"]) for t in tokens]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=x, y=p_raw, name="model p of chosen", marker=dict(color=[prob_color(p, 0.9) for p in p_raw]),
                         customdata=[[lab, pf] for lab, pf in zip(labels, p_final)],
                         hovertemplate="step %{x}: <b>%{customdata[0]}</b><br>model p %{y:.3f}"
                                       "<br>after chain %{customdata[1]:.3f}<extra></extra>"), secondary_y=False)
    if len(steps) == n and n:
        fig.add_trace(go.Scatter(x=x, y=[as_prob(s.get("raw_entropy")) for s in steps], mode="lines",
                                 name="model entropy", line=dict(color=ENTROPY, width=2.5),
                                 hovertemplate="model entropy %{y:.2f} nats<extra></extra>"), secondary_y=True)
        if any(s.get("stages") for s in steps):
            fig.add_trace(go.Scatter(x=x, y=[as_prob(s.get("entropy")) for s in steps], mode="lines",
                                     name="entropy after chain", line=dict(color=ENTROPY, width=2, dash="dot"),
                                     hovertemplate="after chain %{y:.2f} nats<extra></extra>"), secondary_y=True)
    if selected is not None and 0 <= selected < n:
        fig.add_vrect(x0=selected - 0.5, x1=selected + 0.5, fillcolor=CHOSEN, opacity=0.22, line_width=0)
    shade_phases(fig, trace)
    use_words = 0 < n <= 32
    fig.update_layout(template=TEMPLATE, title=dict(text="Chosen-token probability and entropy per step"),
                      bargap=0.12, hovermode="x unified" if n > 60 else "closest",
                      xaxis=dict(title_text=None if use_words else "step",
                                 tickmode="array" if use_words else "auto",
                                 tickvals=x if use_words else None, ticktext=labels if use_words else None,
                                 tickangle=-40 if use_words and n > 10 else 0),
                      margin=dict(t=80, b=50), height=320)
    fig.update_yaxes(title_text="p(chosen)", range=[0, 1.05], secondary_y=False)
    ent_max = max([as_prob(s.get("raw_entropy")) for s in steps] + [as_prob(s.get("entropy")) for s in steps] + [0.5])
    fig.update_yaxes(title_text="entropy (nats)", range=[0, ent_max * 1.1], showgrid=False, secondary_y=True,
                     tickformat=".1f", nticks=6)
    if len(steps) == n and n:
        top = most_uncertain_step(trace)
        add_caption(fig, "bars: the model's p of each chosen token (coloured like the text); line: the model's "
                         "entropy in nats" + ("; dotted: after the chain" if any(s.get("stages") for s in steps) else "")
                    + f"; most uncertain: step {top} (H {num(steps[top].get('raw_entropy'))} nats)")
    return fig


def most_uncertain_step(trace: dict[str, Any]) -> int:
    """The step whose model distribution had the highest entropy (0 for an empty trace)."""
    steps = trace.get("steps") or []
    if not steps:
        return 0
    return max(range(len(steps)), key=lambda i: (as_prob(steps[i].get("raw_entropy")), -i))
