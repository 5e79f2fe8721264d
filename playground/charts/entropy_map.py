"""The entropy map: each generated token at (entropy, varentropy) of the model's own distribution at
its step, coloured by how many tokens the chain left (its kept count), the selected step ringed.

Entropy H = -sum p log p is how spread the distribution is; varentropy sum p (-log p - H)^2 is how
unevenly the surprise is spread (entropix draws this map on SmolLM): low / low is a confident step,
high entropy with low varentropy a flat field of near-equal choices, high varentropy a few strong
candidates over a long tail, the case top-nσ, top-H and p-less are built to read. Every number is
the step's record (``raw_entropy``, ``raw_varentropy``, ``kept_count``, written by
strategies/recording.py); nothing is recomputed here. Pure: no torch, no gradio.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import View, add_caption, show_token
from playground.charts.palette import CHOSEN, TEMPLATE

COLORSCALE = "Viridis"


def points(trace: dict[str, Any]) -> list[tuple[int, float, float, int]]:
    """(step, entropy, varentropy, kept count) of every step that recorded them."""
    out = []
    for i, s in enumerate(trace.get("steps") or []):
        h, v, kept = s.get("raw_entropy"), s.get("raw_varentropy"), s.get("kept_count")
        if h is not None and v is not None and kept is not None:
            out.append((i, h, v, kept))
    return out


def entropy_map_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure | None:
    pts = points(trace)
    if not pts:
        return None
    tokens = trace.get("tokens") or []
    steps = [p[0] for p in pts]
    kept = [p[3] for p in pts]
    labels = [show_token(tokens[i]["text"]) if i < len(tokens) else "" for i in steps]
    fig = go.Figure(go.Scatter(
        x=[p[1] for p in pts], y=[p[2] for p in pts], mode="markers", name="generated tokens",
        marker=dict(size=10, color=[math.log10(max(k, 1)) for k in kept], colorscale=COLORSCALE, showscale=True,
                    cmin=0, cmax=max(1.0, math.log10(max(kept))),  # from one token kept
                    colorbar=dict(title=dict(text="tokens kept"), tickvals=[0, 1, 2, 3, 4, 5],
                                  ticktext=["1", "10", "100", "1k", "10k", "100k"])),
        customdata=[[step, label, k] for step, label, k in zip(steps, labels, kept)],
        hovertemplate="step %{customdata[0]} <b>%{customdata[1]}</b><br>entropy %{x:.3f} nats<br>"
                      "varentropy %{y:.3f}<br>%{customdata[2]} tokens kept<extra></extra>"))
    chosen = [p for p in pts if p[0] == selected]
    if chosen:
        fig.add_trace(go.Scatter(x=[chosen[0][1]], y=[chosen[0][2]], mode="markers", name=f"step {selected}",
                                 marker=dict(size=20, color="rgba(0,0,0,0)", line=dict(color=CHOSEN, width=3)),
                                 hoverinfo="skip"))
    fig.update_layout(template=TEMPLATE, height=360, margin=dict(t=80, b=50),
                      title=dict(text="Entropy map: the model's own distribution per step"),
                      xaxis=dict(title_text="entropy (nats)", rangemode="tozero"),
                      yaxis=dict(title_text="varentropy (nats²)", rangemode="tozero"))
    add_caption(fig, f"each of the {len(pts)} tokens at its step's entropy (x, nats) and varentropy (y, nats²); "
                     f"colour: how many tokens the decoder kept ({min(kept):,} to {max(kept):,})")
    return fig


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    fig = entropy_map_figure(trace, step)
    return [View("Entropy map", fig)] if fig is not None else []
