"""Structured decoding: the grammar stage's feasible mass Z_t over the steps. Pure: no torch, no gradio.

Every step whose chain ran the ``grammar`` stage recorded its decision (strategies.sampling.grammar):
``z``, the probability the stage's input gave the tokens the grammar allows; ``allowed_count``, how
many tokens of the vocabulary it allows; ``forced``, exactly one allowed; ``complete`` and ``dead``.
The chart draws those records as they are, one bar per step, and never recomputes them: a bar
below ``LOW_Z`` is red (the grammar is fighting the model: it took most of the mass the model
wanted to spend elsewhere), a forced step is hatched.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import View, escape
from playground.charts.figures import show_token
from playground.charts.palette import CHOSEN, FEASIBLE, FIGHTING, FIGHTING_BAND, GRAMMAR_FORCED, TEMPLATE

LOW_Z = 0.1  # below this feasible mass the grammar is fighting the model
FLOOR = 1e-6  # the log axis starts here at the latest (a recorded z of 0 sits on it)
TITLE = "Grammar: feasible mass Z_t per step"


def grammar_series(trace: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(step index, the grammar stage's decision) of every step whose chain ran it."""
    out = []
    for i, s in enumerate(trace.get("steps") or []):
        for st in s.get("stages") or []:
            if st["name"] == "grammar" and st.get("decision"):
                out.append((i, st["decision"]))
                break
    return out


def has_grammar(trace: dict[str, Any]) -> bool:
    return bool(grammar_series(trace))


def _z(decision: dict[str, Any]) -> float:
    z = decision.get("z")
    return 0.0 if z is None else float(z)


def _fmt(z: float) -> str:
    return f"{z:.3f}" if z >= 0.001 else f"{z:.1e}"


def z_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure | None:
    """Z_t per step as bars on a log axis (the recorded ``z``, nothing recomputed), red below
    ``LOW_Z``, hatched where the grammar forced the token; the allowed count on hover. None when no
    step ran the grammar stage."""
    series = grammar_series(trace)
    if not series:
        return None
    tokens = trace.get("tokens") or []
    steps = [i for i, _ in series]
    zs = [_z(d) for _, d in series]
    counts = [int(d.get("allowed_count") or 0) for _, d in series]
    forced = [bool(d.get("forced")) for _, d in series]
    labels = [show_token(tokens[i]["text"]) if i < len(tokens) else "" for i in steps]
    states = ["forced: the one token allowed" if f else ("text complete" if d.get("complete") else "")
              for f, (_, d) in zip(forced, series)]
    low = [z < LOW_Z for z in zs]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=steps, y=[max(z, FLOOR) for z in zs], name="Z_t (recorded)", meta={"role": "z"},
        marker=dict(color=[FIGHTING if lo else FEASIBLE for lo in low],
                    pattern=dict(shape=["/" if f else "" for f in forced], fgcolor=GRAMMAR_FORCED, size=7,
                                 solidity=0.45)),
        customdata=[[z, c, lab, st] for z, c, lab, st in zip(zs, counts, labels, states)],
        hovertemplate="step %{x}: <b>%{customdata[2]}</b><br>Z %{customdata[0]:.4g}"
                      "<br>%{customdata[1]:,} tokens allowed<br>%{customdata[3]}<extra></extra>"))
    # legend keys for the colours and the hatching (no data: the bars above carry the numbers)
    for name, colour, shape in (("grammar fighting the model (Z < " + f"{LOW_Z:g})", FIGHTING, ""),
                                ("forced (one token allowed)", FEASIBLE, "/")):
        fig.add_trace(go.Bar(x=[None], y=[None], name=name, showlegend=True,
                             marker=dict(color=colour, pattern=dict(shape=shape, fgcolor=GRAMMAR_FORCED))))
    lowest = min(zs)
    bottom = min(FLOOR, lowest) if lowest > 0 else FLOOR
    fig.add_hrect(y0=bottom, y1=LOW_Z, fillcolor=FIGHTING_BAND, line_width=0, layer="below")
    fig.add_annotation(x=0, xref="paper", xanchor="left", y=LOW_Z, yref="y", yanchor="top", showarrow=False,
                       text="the grammar is fighting the model", font=dict(color=FIGHTING, size=13))
    if selected is not None:
        fig.add_vrect(x0=selected - 0.5, x1=selected + 0.5, fillcolor=CHOSEN, opacity=0.22, line_width=0)
    worst = zs.index(lowest)
    grammar = trace.get("grammar") or {}
    kind = escape(grammar.get("kind", ""), quote=False)
    sub = (f"{kind + ' · ' if kind else ''}lowest Z {_fmt(lowest)} at step {steps[worst]} "
           f"({labels[worst]}) · {sum(forced)} of {len(series)} steps forced")
    use_words = 0 < len(steps) <= 32
    fig.update_layout(template=TEMPLATE, height=330, bargap=0.15, hovermode="closest",
                      title=dict(text=f"{TITLE}<br><sup>{sub}</sup>"),
                      xaxis=dict(title_text=None if use_words else "step", tickmode="array" if use_words else "auto",
                                 tickvals=steps if use_words else None, ticktext=labels if use_words else None,
                                 tickangle=-40 if use_words and len(steps) > 10 else 0),
                      yaxis=dict(type="log", title_text="Z_t (log)", range=[math.log10(bottom) - 0.2, 0.08],
                                 dtick=1, exponentformat="power"),
                      legend=dict(y=1.02), margin=dict(t=96, b=50))
    return fig


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """The Z_t chart, for a trace whose chain ran the grammar stage; nothing otherwise."""
    fig = z_figure(trace, step)
    return [View(TITLE, fig)] if fig is not None else []
