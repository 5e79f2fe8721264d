"""The loops a run recorded (strategies/loops.py), on a timeline over its steps: one row per loop, one
band per copy of its span (a copy is ``period`` steps, from ``start`` on; a last part-copy, when the
period held for some tokens past the whole copies, is paler), and a mark at ``found_at``, the step whose
token completed the loop. The caption names each loop: its span's text, period, copies and steps.
Every number is the trace's ``loops`` record; nothing is recomputed. Pure: no torch, no gradio.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from playground.charts.common import TOKEN_MARKS, View, add_caption, counted, escape, show_token, token_text
from playground.charts.palette import CHOSEN, INK, LOOP, LOOP_FOUND, TEMPLATE, WHITE, rgba

NAMED = 3  # the caption names this many loops, then counts the rest
STOPPED = "loop"  # the finish reason of a run that loop_stop ended (strategies.loops.LOOP_REASON)


def loops_of(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's loop records, in the order found ([] when it has none or did not look)."""
    return list(trace.get("loops") or [])


def copies(loop: dict[str, Any]) -> list[tuple[int, int, bool]]:
    """(first step, steps, whole?) of each copy: ``repeats`` whole copies of ``period`` steps from
    ``start``, then the part-copy that makes up ``length``, if any."""
    start, period, repeats, length = loop["start"], loop["period"], loop["repeats"], loop["length"]
    out = [(start + c * period, period, True) for c in range(repeats)]
    if length > repeats * period:
        out.append((start + repeats * period, length - repeats * period, False))
    return out


def row_name(k: int, loop: dict[str, Any]) -> str:
    """A loop's row: short, so a phone keeps its width for the steps (the span's text is in the title, the
    caption and the hover)."""
    return f"loop {k + 1}"


def span_text(loop: dict[str, Any], limit: int = 40) -> str:
    """The loop's span as a chart writes a token, cut to ``limit`` characters with "…", escaped for a label or
    HTML text (a 14-token sentence would stretch a title past its chart)."""
    shown = token_text(loop["text"])
    return escape(shown if len(shown) <= limit else shown[:limit - 1] + "…", quote=False)


def loop_words(loop: dict[str, Any], limit: int = 40, steps: bool = True) -> str:
    """One loop in words: '«a time» (period 2) ×3 from step 0, found at step 5' (without ``steps``, up to the
    copies: a title's room)."""
    return (f"«{span_text(loop, limit)}» (period {loop['period']}) ×{loop['repeats']}"
            + (f" from step {loop['start']}, found at step {loop['found_at']}" if steps else ""))


def loops_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure:
    loops = loops_of(trace)
    names = [row_name(k, lp) for k, lp in enumerate(loops)]
    fig = go.Figure()
    for k, lp in enumerate(loops):
        spans = copies(lp)
        fig.add_trace(go.Bar(
            y=[names[k]] * len(spans), x=[n for _, n, _ in spans], base=[s - 0.5 for s, _, _ in spans],
            orientation="h", name=names[k], width=0.55, showlegend=False,
            marker=dict(color=[rgba(LOOP, 0.7 if whole else 0.2) for _, _, whole in spans],
                        line=dict(color=LOOP, width=2)),  # the outlines part the copies
            text=[str(c + 1) if whole else "" for c, (_, _, whole) in enumerate(spans)],
            textposition="inside", insidetextanchor="middle", textfont=dict(color=INK, size=14),
            customdata=[[s, s + n - 1, "copy " + str(c + 1) if whole else "part of a copy", show_token(lp["text"])]
                        for c, (s, n, whole) in enumerate(spans)],
            hovertemplate="<b>%{customdata[3]}</b>: %{customdata[2]}, steps %{customdata[0]} to "
                          "%{customdata[1]}<br>"
                          f"period {lp['period']}, {lp['repeats']} whole copies, {lp['length']} tokens<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[lp["found_at"] for lp in loops], y=names, mode="markers", name="found",
        marker=dict(symbol="diamond", size=13, color=LOOP_FOUND, line=dict(color=WHITE, width=1)),
        hovertemplate="found at step %{x}: its last copy ended there<extra></extra>", cliponaxis=False))
    if selected is not None:
        fig.add_vline(x=selected, line=dict(color=CHOSEN, width=2))
    steps = len(trace.get("steps") or trace.get("tokens") or [])
    stopped = trace.get("finish_reason") == STOPPED
    if len(loops) == 1:
        title = f"Loop: {loop_words(loops[0], 30, steps=False)}" + (" · it stopped the run" if stopped else "")
    else:
        title = f"Loops: {len(loops)} found" + (" · the last one stopped the run" if stopped else "")
    fig.update_layout(template=TEMPLATE, height=200 + 44 * len(loops), margin=dict(t=80, b=60), showlegend=False,
                      title=dict(text=title),
                      xaxis=dict(title_text="step", range=[-0.7, max(steps, 1) - 0.3], dtick=1 if steps <= 20 else None),
                      yaxis=dict(autorange="reversed", categoryorder="array", categoryarray=names))
    named = "; ".join(f"{k + 1}: {loop_words(lp, 80)}, {counted(lp['length'], 'token')}"
                      for k, lp in enumerate(loops[:NAMED]))
    more = f"; and {len(loops) - NAMED} more" if len(loops) > NAMED else ""
    part = any(lp["length"] > lp["repeats"] * lp["period"] for lp in loops)
    add_caption(fig, "each band is one copy of the span, numbered"
                     + ("; a paler band: the period held for a part-copy more" if part else "")
                     + f"; ◆ the step the loop was found. {named}{more}; {TOKEN_MARKS}")
    return fig


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    return [View("Loops", loops_figure(trace, step))] if loops_of(trace) else []
