"""The watch-list over a run: each watched token's probability at every step, drawn from the steps'
``watch`` records (strategies/watch.py): after the whole chain (a solid line, what the selector drew
from) and in the model's own distribution (a thinner dashed line of the same colour), on a log axis,
since a watched token's probability spans decades; the hover gives both ranks. A probability of 0 (the
chain cut the token) has no place on a log axis: it is drawn on a dotted floor line a decade under the
smallest recorded probability, and its hover says 0. Nothing is recomputed. Pure: no torch, no gradio.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import TOKEN_MARKS, View, add_caption, prob_brief, show_token
from playground.charts.palette import CHOSEN, GUIDE, TEMPLATE, WATCHED


def watched(trace: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[int, list[dict[str, Any]]]]]:
    """(the watched tokens ``[{id, text}]``, (step index, the step's ``watch`` record) of every step that
    has one); both empty for a trace without a watch-list."""
    heading = trace.get("watch") or []
    if not heading:
        return [], []
    rows = [(i, s["watch"]) for i, s in enumerate(trace.get("steps") or []) if len(s.get("watch") or ()) == len(heading)]
    return heading, rows


def watched_colours(trace: dict[str, Any]) -> dict[int, str]:
    """Watched token id -> its colour, the one its line has here and its label in the step's distribution."""
    return {w["id"]: WATCHED[j % len(WATCHED)] for j, w in enumerate(trace.get("watch") or [])}


def floor_of(rows: list[tuple[int, list[dict[str, Any]]]]) -> float:
    """Where a probability of 0 is drawn: the decade under the smallest recorded non-zero probability."""
    nonzero = [w[key] for _, ws in rows for w in ws for key in ("prob", "raw_prob") if w.get(key)]
    return 10.0 ** (math.floor(math.log10(min(nonzero))) - 1) if nonzero else 1e-6


def watch_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure:
    heading, rows = watched(trace)
    steps = [i for i, _ in rows]
    floor = floor_of(rows)
    tokens = trace.get("tokens") or []
    chosen = [show_token(tokens[i]["text"]) if i < len(tokens) else "" for i in steps]
    fig = go.Figure()
    for j, tok in enumerate(heading):
        colour, label = watched_colours(trace)[tok["id"]], show_token(tok["text"])
        ws = [r[j] for _, r in rows]
        hover = [[c, label, prob_brief(w["prob"] or 0.0), w["rank"], prob_brief(w["raw_prob"] or 0.0), w["raw_rank"]]
                 for c, w in zip(chosen, ws)]
        template = ("step %{x} (chose <b>%{customdata[0]}</b>)<br><b>%{customdata[1]}</b>: p %{customdata[2]}, "
                    "rank %{customdata[3]:,} after the chain<br>model p %{customdata[4]}, rank %{customdata[5]:,}"
                    "<extra></extra>")
        fig.add_trace(go.Scatter(x=steps, y=[w["raw_prob"] or floor for w in ws], mode="lines", name=f"{label} (model)",
                                 line=dict(color=colour, width=1.2, dash="dash"), customdata=hover,
                                 hovertemplate=template, legendgroup=label, showlegend=False))
        fig.add_trace(go.Scatter(x=steps, y=[w["prob"] or floor for w in ws], mode="lines+markers", name=label,
                                 line=dict(color=colour, width=2.5), marker=dict(size=6, color=colour),
                                 customdata=hover, hovertemplate=template, legendgroup=label))
    if any(not w.get(key) for _, ws in rows for w in ws for key in ("prob", "raw_prob")):
        fig.add_hline(y=floor, line=dict(color=GUIDE, dash="dot", width=1))
        # on a log axis an annotation's y is the exponent (a shape's is the value)
        fig.add_annotation(x=1, xref="paper", xanchor="right", y=math.log10(floor), yanchor="bottom",
                           text="0 (cut)", showarrow=False, font=dict(size=12))
    if selected is not None and selected in steps:
        fig.add_vline(x=selected, line=dict(color=CHOSEN, width=2))
    fig.update_layout(template=TEMPLATE, height=380, margin=dict(t=90, b=60),
                      title=dict(text=f"Watch-list: {len(heading)} token{'s' if len(heading) != 1 else ''} over "
                                      f"{len(steps)} steps" + _at(heading, rows, selected)),
                      xaxis=dict(title_text="step", rangemode="tozero", dtick=1 if len(steps) <= 20 else None),
                      yaxis=dict(title_text="probability (log)", type="log", exponentformat="power"),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left"))
    same = all(w["prob"] == w["raw_prob"] for _, ws in rows for w in ws)
    add_caption(fig, "each watched token's probability after the chain (solid) and in the model's own distribution "
                     "(dashed" + ("; the chain changed none of them, so it lies under the solid line" if same else "")
                     + "), as recorded at every step; " + _peaks(heading, rows) + f"; {TOKEN_MARKS}")
    return fig


def _at(heading: list[dict[str, Any]], rows: list[tuple[int, list[dict[str, Any]]]], selected: int | None) -> str:
    """The title's tail: the watched token that ranks best at the selected step."""
    record = next((ws for i, ws in rows if i == selected), None)
    if record is None:
        return ""
    j = min(range(len(heading)), key=lambda k: record[k]["rank"])
    return (f"; at step {selected} the best placed is <b>{show_token(heading[j]['text'])}</b>, rank "
            f"{record[j]['rank']:,} (p {prob_brief(record[j]['prob'] or 0.0)})")


def _peaks(heading: list[dict[str, Any]], rows: list[tuple[int, list[dict[str, Any]]]]) -> str:
    """Each watched token's highest probability after the chain, where, and its rank there."""
    parts = []
    for j, tok in enumerate(heading):
        i, w = max(((i, ws[j]) for i, ws in rows), key=lambda r: (r[1]["prob"] or 0.0, -r[1]["rank"]))
        if w["prob"]:
            parts.append(f"{show_token(tok['text'])} {prob_brief(w['prob'])} at step {i} (rank {w['rank']:,})")
        else:
            parts.append(f"{show_token(tok['text'])} cut at every step (best rank {w['rank']:,}, step {i})")
    return "highest p: " + ", ".join(parts)


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    heading, rows = watched(trace)
    return [View("Watch-list", watch_figure(trace, step))] if heading and rows else []
