"""A run's two phases (strategies/phases.py) as the charts and the status line show them: the thinking
steps shaded, the step a budget cut the thinking marked, and one line in words. Pure: plotly only;
everything is read from the trace's ``phases`` and each step's ``phase``, never recomputed.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import counted, prob_text
from playground.charts.palette import BUDGET_CUT, THINKING_BAND

THINKING = "thinking"


def phases_of(trace: dict[str, Any]) -> dict[str, Any] | None:
    """The trace's phase record, or None for a run without phases."""
    record = trace.get("phases")
    return record if isinstance(record, dict) else None


def thinking_span(trace: dict[str, Any]) -> tuple[int, int] | None:
    """(first, last) step of the thinking phase as the steps recorded it, or None when no step thinks."""
    thinking = [i for i, s in enumerate(trace.get("steps") or []) if s.get("phase") == THINKING]
    return (thinking[0], thinking[-1]) if thinking else None


def shade_phases(fig: go.Figure, trace: dict[str, Any]) -> None:
    """Shade the thinking steps of a per-step figure (x = step) and mark a budget's cut."""
    record = phases_of(trace)
    span = thinking_span(trace) if record else None
    if span is None or record is None:
        return
    fig.add_vrect(x0=span[0] - 0.5, x1=span[1] + 0.5, fillcolor=THINKING_BAND, line_width=0, layer="below",
                  annotation_text="thinking", annotation_position="top left", annotation_font_size=11)
    cut = record.get("cut")
    if cut:
        fig.add_vline(x=cut["step"] - 0.5, line_color=BUDGET_CUT, line_dash="dash", line_width=2)


def phase_line(trace: dict[str, Any]) -> str:
    """The phases in words, for the status line and the CLI ("" for a run without phases):
    'thinking 12 tokens, answer from step 13' or 'thinking cut at 8 tokens: the model gave </think> p 0.0012'."""
    record = phases_of(trace)
    if record is None:
        return ""
    marker = record.get("marker", "")
    span = thinking_span(trace)
    thought = 0 if span is None else span[1] - span[0] + 1
    cut = record.get("cut")
    if cut:
        p = cut.get("marker_p")
        said = (f"the model gave {marker} p {prob_text(p)}" if p is not None
                else f"the model gave the budget message's first token p {prob_text(cut.get('first_forced_p'))}")
        text = f"thinking cut at {counted(cut['thinking_tokens'], 'token')}: {said}"
    elif record.get("answer_from") is not None:
        text = f"thinking {counted(thought, 'token')}, closed by the model's own {marker}"
    else:
        text = f"thinking {counted(thought, 'token')}, no {marker} yet"
    if record.get("answer_from") is not None:
        text += f"; answer from step {record['answer_from']}"
        if record.get("answer_params"):
            text += " (its own chain: " + ", ".join(f"{k} {v}" for k, v in record["answer_params"].items()) + ")"
    return text


def forced_tip(step: dict[str, Any]) -> str:
    """The hover line of a token the thinking budget forced: the model's own view of it."""
    logp = step.get("model_logprob")
    p = prob_text(0.0 if logp is None else math.exp(logp))
    return f"forced by the thinking budget: the model gave it p {p} (rank {step.get('model_rank', '?')})"
