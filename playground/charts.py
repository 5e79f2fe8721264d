"""Trace (its JSON dict) -> plotly figures. Pure: no torch, no gradio."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

KEPT = "#2563eb"
CUT = "#cbd5e1"


def distribution_figure(trace: dict[str, Any], step: int = 0, top: int = 20) -> go.Figure:
    """Sorted top candidates at ``step``: the model's probability, kept vs cut coloured."""
    s = trace["steps"][step]
    cands = sorted(s["candidates"], key=lambda c: -(c["raw_prob"] or 0))[:top]
    colors = [KEPT if c["kept"] else CUT for c in cands]
    fig = go.Figure(go.Bar(x=[repr(c["text"]) for c in cands], y=[c["raw_prob"] for c in cands],
                           marker_color=colors, name="model probability"))
    fig.update_layout(title=f"step {step}: chose {trace['tokens'][step]['text']!r}", yaxis_title="probability")
    return fig
