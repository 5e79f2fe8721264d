"""Structured decoding: the grammar stage's feasible mass Z_t over the steps. Pure: no torch, no gradio.

Every step whose chain ran the ``grammar`` stage recorded its decision (strategies.sampling.grammar):
``z``, the probability the stage's input gave the tokens the grammar allows; ``allowed_count``, how
many tokens of the vocabulary it allows; ``forced``, exactly one allowed; ``complete`` and ``dead``;
``mask``, what the mask is: ``feasible`` (every token whose bytes continue a valid text, so Z_t is the
grammar's feasible mass). A record without ``mask`` is drawn as the mass the matcher allowed, which a
matcher that forces a text (one token where several spell its continuation) can hold below the
grammar's feasible mass. The chart draws those records as they are, one point per step, and never recomputes them: a point
below ``LOW_Z`` is red, in a red band (the grammar is fighting the model: the tokens it allows had
little of the model's probability), a forced step is a diamond.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import View, add_caption, escape, show_token
from playground.charts.palette import CHOSEN, FEASIBLE, FIGHTING, FIGHTING_BAND, GRAMMAR_FORCED, TEMPLATE

LOW_Z = 0.1  # below this feasible mass the grammar is fighting the model
FLOOR = 1e-6  # the log axis starts here at the latest (a recorded z of 0 is drawn at its bottom)
TITLE = "Grammar: feasible mass Z_t per step"
# the record's ``mask`` -> (the title's name for Z_t, the tokens whose mass it is)
MASK_MEANINGS = {"feasible": ("feasible mass", "every token that continues a valid text")}
UNSTATED = ("allowed mass", "the tokens the matcher allowed")


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


def meaning(series: list[tuple[int, dict[str, Any]]]) -> tuple[str, str]:
    """What the recorded Z_t is the mass of, from the records' ``mask`` (all of them must say it)."""
    masks: set[Any] = {d.get("mask") for _, d in series}
    return MASK_MEANINGS.get(masks.pop(), UNSTATED) if len(masks) == 1 else UNSTATED


def _fmt(z: float) -> str:
    return f"{z:.3f}" if z >= 0.001 else f"{z:.1e}"


def z_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure | None:
    """Z_t per step on a log axis (the recorded ``z``, nothing recomputed): a red marker below
    ``LOW_Z``, in the red band of the steps where the grammar fights the model; a diamond where the
    grammar forced the token; the allowed count on hover. None when no step ran the grammar stage."""
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
    lowest = min(zs)
    bottom = min(FLOOR, lowest) if lowest > 0 else FLOOR
    fig = go.Figure()
    fig.add_hrect(y0=bottom, y1=LOW_Z, fillcolor=FIGHTING_BAND, line_width=0, layer="below")
    fig.add_trace(go.Scatter(
        x=steps, y=[z if z > 0 else bottom for z in zs], name="Z_t (recorded)", meta={"role": "z"},
        mode="lines+markers", showlegend=False,
        line=dict(color=FEASIBLE, width=2),
        marker=dict(color=[FIGHTING if lo else FEASIBLE for lo in low],
                    symbol=["diamond" if f else "circle" for f in forced],
                    size=[13 if f else 9 for f in forced], line=dict(width=[2 if f else 0 for f in forced],
                                                                   color=GRAMMAR_FORCED)),
        customdata=[[z, c, lab, st] for z, c, lab, st in zip(zs, counts, labels, states)],
        hovertemplate="step %{x}: <b>%{customdata[2]}</b><br>Z %{customdata[0]:.4g}"
                      "<br>%{customdata[1]:,} tokens allowed<br>%{customdata[3]}<extra></extra>"))
    # legend keys for the red and the diamonds (no data: the trace above carries the numbers)
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines+markers", name="Z_t per step", showlegend=True,
                             line=dict(color=FEASIBLE, width=2), marker=dict(color=FEASIBLE, size=9)))
    for name, colour, symbol in ((f"Z < {LOW_Z:g} (red band)", FIGHTING, "circle"),
                                 ("forced (one token allowed)", FEASIBLE, "diamond")):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True,
                                 marker=dict(color=colour, symbol=symbol, size=11,
                                             line=dict(width=2 if symbol == "diamond" else 0, color=GRAMMAR_FORCED))))
    if selected is not None:
        fig.add_vrect(x0=selected - 0.5, x1=selected + 0.5, fillcolor=CHOSEN, opacity=0.22, line_width=0)
    worst = zs.index(lowest)
    name, whose = meaning(series)
    grammar = trace.get("grammar") or {}
    kind = escape(grammar.get("kind", ""), quote=False)
    fights = sum(low)
    sub = (f"{kind + ' · ' if kind else ''}lowest Z {_fmt(lowest)} at step {steps[worst]} "
           f"({labels[worst]}) · {sum(forced)} of {len(series)} steps forced")
    if fights:  # the note, where it is never under a point
        sub += f" · <b>red: the grammar is fighting the model</b> at {fights} step{'s' if fights > 1 else ''}"
    use_words = 0 < len(steps) <= 32
    fig.update_layout(template=TEMPLATE, height=340, hovermode="closest",
                      title=dict(text=f"Grammar: {name} Z_t per step<br><sup>{sub}</sup>", y=0.94),
                      xaxis=dict(title_text=None if use_words else "step", tickmode="array" if use_words else "auto",
                                 tickvals=steps if use_words else None, ticktext=labels if use_words else None,
                                 tickangle=-40 if use_words and len(steps) > 10 else 0,
                                 range=[min(steps) - 0.6, max(steps) + 0.6]),
                      yaxis=dict(type="log", title_text="Z_t (log)", range=[math.log10(bottom) - 0.4, 0.15],
                                 dtick=1 if bottom >= 1e-6 else 2, exponentformat="power"),
                      legend=dict(y=1.02), margin=dict(t=104, b=50))
    add_caption(fig, f"Z_t: the mass the model gave {whose} at each step (log axis); lowest "
                     f"{_fmt(lowest)} at step {steps[worst]}; diamonds: {sum(forced)} forced steps; red band: Z below "
                     f"{LOW_Z:g}")
    return fig


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """The Z_t chart, for a trace whose chain ran the grammar stage; nothing otherwise."""
    fig = z_figure(trace, step)
    return [View(TITLE, fig)] if fig is not None else []
