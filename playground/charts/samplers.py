"""Views of the sampler stages that change from step to step: mirostat's mu, adaptive-p's running
average, the dynamic temperature, XTC's coin. Drawn from each step's recorded decisions. Pure: no torch, no gradio."""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from playground.charts.common import View, add_caption, num, show_token
from playground.charts.marks import xtc_reason
from playground.charts.palette import CHOSEN, INK, MIROSTAT, TEMPLATE, XTC


def stage_series(trace: dict[str, Any], name: str) -> list[tuple[int, dict[str, Any]]]:
    """(step index, decision) of every step whose chain ran stage ``name``."""
    out = []
    for i, s in enumerate(trace.get("steps") or []):
        for st in s.get("stages") or []:
            if st["name"] == name and st.get("decision"):
                out.append((i, st["decision"]))
    return out


def _labels(trace: dict[str, Any], steps: list[int]) -> list[str]:
    tokens = trace.get("tokens") or []
    return [show_token(tokens[i]["text"]) if i < len(tokens) else "" for i in steps]


def _frame(fig: go.Figure, title: str, y_title: str, selected: int | None, caption: str = "") -> go.Figure:
    if selected is not None:
        fig.add_vrect(x0=selected - 0.5, x1=selected + 0.5, fillcolor=CHOSEN, opacity=0.22, line_width=0)
    fig.update_layout(template=TEMPLATE, title=dict(text=title), height=300, hovermode="x unified",
                      xaxis=dict(title_text="step"), yaxis=dict(title_text=y_title), margin=dict(t=80, b=50))
    if caption:
        add_caption(fig, caption)
    return fig


def mirostat_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure | None:
    """Mirostat's mu before each step (the cap it truncated at), the surprise of the token chosen, and
    the target tau: mu settles where the surprise averages tau (Basu et al. 2021)."""
    series = stage_series(trace, "mirostat")
    if not series:
        return None
    steps = [i for i, _ in series]
    labels = _labels(trace, steps)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=[d.get("mu") for _, d in series], mode="lines+markers", name="μ (cap)",
                             line=dict(color=MIROSTAT, width=2.5), customdata=labels,
                             hovertemplate="μ %{y:.3f} bits<extra>%{customdata}</extra>"))
    fig.add_trace(go.Scatter(x=steps, y=[d.get("surprise") for _, d in series], mode="markers",
                             name="surprise of the chosen token", marker=dict(color=INK, size=6, symbol="x"),
                             hovertemplate="surprise %{y:.3f} bits<extra></extra>"))
    tau = series[0][1].get("tau")
    if tau is not None:
        fig.add_hline(y=tau, name="mirostat tau", line=dict(color=MIROSTAT, dash="dot", width=2),
                      annotation=dict(text=f"target τ {tau:g}", font=dict(color=MIROSTAT)),
                      annotation_position="top left")
    mus = [d.get("mu") for _, d in series if d.get("mu") is not None]
    return _frame(fig, "Mirostat: μ per step (bits)", "bits", selected,
                  f"line: μ, the surprise cap before each step ({num(mus[0]) if mus else '?'} → "
                  f"{num(mus[-1]) if mus else '?'} bits); x: the chosen token's surprise; dotted: the target τ"
                  + (f" {tau:g}" if tau is not None else "") + " · in bits, mirostat's own unit (1 bit = 0.69 nats)")


def adaptive_p_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure | None:
    """Adaptive-p's running average of the chosen tokens' probabilities before each step, the
    probability it aimed at (2 target − average, clamped), the chosen token's probability, and the
    target: the average is steered to the target (llama.cpp PR #17927)."""
    series = stage_series(trace, "adaptive_p")
    if not series:
        return None
    steps = [i for i, _ in series]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=[d.get("average") for _, d in series], mode="lines+markers",
                             name="running average (before the step)", line=dict(color=MIROSTAT, width=2.5),
                             customdata=_labels(trace, steps),
                             hovertemplate="average %{y:.3f}<extra>%{customdata}</extra>"))
    fig.add_trace(go.Scatter(x=steps, y=[d.get("adapted") for _, d in series], mode="lines",
                             name="aimed at (2 target − average)", line=dict(color=XTC, width=1.5, dash="dash"),
                             hovertemplate="aimed at p %{y:.3f}<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=[d.get("chosen_prob") for _, d in series], mode="markers",
                             name="probability of the chosen token", marker=dict(color=INK, size=6, symbol="x"),
                             hovertemplate="chosen p %{y:.3f}<extra></extra>"))
    target = series[0][1].get("target")
    if target is not None:
        fig.add_hline(y=target, name="adaptive-p target", line=dict(color=MIROSTAT, dash="dot", width=2),
                      annotation=dict(text=f"target {target:g}", font=dict(color=MIROSTAT)),
                      annotation_position="top left")
    last = series[-1][1].get("average")
    return _frame(fig, "Adaptive-p: running average per step", "probability", selected,
                  "line: the running average of the chosen tokens' p before each step (last "
                  f"{num(last, 3)}); dashed: the p it aimed at; x: the chosen token's p; dotted: the target"
                  + (f" {target:g}" if target is not None else ""))


def adaptive_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure | None:
    """The dynamic temperature used at each step, and XTC's coin with whether it acted."""
    temps, coins = stage_series(trace, "dynamic_temperature"), stage_series(trace, "xtc")
    if not temps and not coins:
        return None
    fig = go.Figure()
    if temps:
        fig.add_trace(go.Scatter(x=[i for i, _ in temps], y=[d.get("t") for _, d in temps], mode="lines+markers",
                                 name="dynamic T", line=dict(color=MIROSTAT, width=2.5),
                                 customdata=[d.get("normalized") for _, d in temps],
                                 hovertemplate="T %{y:.3f} · H/log N %{customdata:.2f}<extra></extra>"))
    if coins:
        acted = [bool(d.get("acted")) for _, d in coins]
        fig.add_trace(go.Scatter(x=[i for i, _ in coins], y=[d.get("coin") for _, d in coins], mode="markers",
                                 name="XTC coin (filled: acted)", marker=dict(
                                     color=XTC, size=9, symbol=["circle" if a else "circle-open" for a in acted]),
                                 customdata=[xtc_reason(d) for _, d in coins], meta={"role": "xtc coin"},
                                 hovertemplate="XTC %{customdata}<extra></extra>"))
        fig.add_hline(y=coins[0][1].get("probability"), name="xtc probability",
                      line=dict(color=XTC, dash="dot", width=1.5))
    title = " and ".join(filter(None, ("dynamic temperature" if temps else "", "XTC's coin" if coins else "")))
    said = []
    if temps:
        said.append(f"line: the temperature used at each step ({num(min(d.get('t') or 0 for _, d in temps))} to "
                    f"{num(max(d.get('t') or 0 for _, d in temps))})")
    if coins:
        said.append(f"circles: XTC's coin, filled where it acted ({sum(acted)} of {len(coins)} steps); dotted: its "
                    "probability")
        here = next((d for i, d in coins if i == selected), None)
        if here is not None and xtc_reason(here):
            said.append(f"XTC at step {selected}: {xtc_reason(here)}")
    return _frame(fig, title[0].upper() + title[1:] + " per step", "value", selected, "; ".join(said))


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    out = []
    for title, make in (("Mirostat μ", mirostat_figure), ("Adaptive-p average", adaptive_p_figure),
                        ("Adaptive stages", adaptive_figure)):
        fig = make(trace, step)
        if fig is not None:
            out.append(View(title, fig))
    return out
