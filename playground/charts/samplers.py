"""Views of the sampler stages that change from step to step: mirostat's mu, adaptive-p's running
average, the dynamic temperature, XTC's coin; and of the Gumbel-max selector: the noise it added to
each candidate's final logit at a step, and all the noise of the run against the Gumbel(0, 1) density.
Drawn from each step's recorded decisions. Pure: no torch, no gradio."""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import TOKEN_MARKS, View, add_caption, num, show_token
from playground.charts.marks import xtc_reason
from playground.charts.palette import CHOSEN, FINAL, GUIDE, INK, MIROSTAT, NOISE, TEMPLATE, XTC


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


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def noise_values(trace: dict[str, Any]) -> list[float]:
    """Every candidate's recorded Gumbel noise over the run's steps, in step and candidate order."""
    return [float(c["gumbel"]) for s in trace.get("steps") or [] for c in s.get("candidates") or []
            if _finite(c.get("gumbel"))]


def gumbel_density(x: float) -> float:
    """The standard Gumbel density exp(-(x + e^-x)): the reference the recorded noise is drawn against."""
    return math.exp(-(x + math.exp(-x)))


def gumbel_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure | None:
    """The Gumbel-max selector at one step: per candidate, its final logit (after the chain) and the
    noise added to it, ending at the perturbed logit it was compared by; the chosen token (the recorded
    pick, the largest perturbed logit) starred. Below, every noise the run recorded against the
    Gumbel(0, 1) density. All from the candidates' recorded ``logit``, ``gumbel`` and
    ``perturbed_logit``: a candidate missing one (a logit the chain cut) is not drawn. The histogram
    holds the listed candidates' noise, and the chosen token is always listed: its noise, which made it
    win, is slightly over-represented in the right tail."""
    steps = trace.get("steps") or []
    noises = noise_values(trace)
    if not noises:
        return None
    k = len(steps) - 1 if selected is None else max(0, min(int(selected), len(steps) - 1))
    s = steps[k]
    cands = s.get("candidates") or []
    drawn = [c for c in cands if all(_finite(c.get(f)) for f in ("logit", "gumbel", "perturbed_logit"))]
    left_out = len(cands) - len(drawn)
    labels = [show_token(c["text"]) for c in drawn]
    ids = [[c["id"]] for c in drawn]
    pos = list(range(len(drawn)))
    chosen = next((j for j, c in enumerate(drawn) if c["id"] == s.get("chosen")), None)
    ticks = [f"<b>{t}</b>" if j == chosen else t for j, t in enumerate(labels)]
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.16, row_heights=[0.64, 0.36], subplot_titles=(
        f"step {k}: final logit + noise = perturbed logit",
        f"noise at every step ({len(noises)} values) vs Gumbel(0, 1)"))
    fig.add_trace(go.Bar(y=pos, x=[c["logit"] for c in drawn], orientation="h", name="final logit (after the chain)",
                         marker_color=FINAL, width=0.8, customdata=ids, text=labels, textposition="none",
                         meta={"role": "logit"},
                         hovertemplate="<b>%{text}</b> (id %{customdata[0]})<br>final logit %{x:.3f}<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Bar(y=pos, x=[c["gumbel"] for c in drawn], base=[c["logit"] for c in drawn], orientation="h",
                         name="+ Gumbel noise", marker_color=NOISE, width=0.4, customdata=ids, text=labels,
                         textposition="none", meta={"role": "noise"},
                         hovertemplate="<b>%{text}</b><br>noise %{x:+.3f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(y=pos, x=[c["perturbed_logit"] for c in drawn], mode="markers", name="= perturbed logit",
                             marker=dict(symbol="diamond", size=9, color=NOISE, line=dict(width=1, color=GUIDE)),
                             customdata=ids, text=labels, meta={"role": "perturbed"},
                             hovertemplate="<b>%{text}</b><br>perturbed logit %{x:.3f}<extra></extra>"),
                  row=1, col=1)
    if chosen is not None:
        c = drawn[chosen]
        fig.add_trace(go.Scatter(y=[chosen], x=[c["perturbed_logit"]], mode="markers", name="chosen",
                                 marker=dict(symbol="star", size=17, color=CHOSEN, line=dict(width=1, color=GUIDE)),
                                 customdata=[[c["id"]]], text=[labels[chosen]], meta={"role": "chosen"},
                                 hovertemplate="<b>%{text}</b> chosen<br>perturbed logit %{x:.3f}<extra></extra>"),
                      row=1, col=1)
    fig.update_yaxes(tickvals=pos, ticktext=ticks, autorange="reversed", row=1, col=1)
    fig.update_xaxes(title_text="logit", row=1, col=1)
    lo, hi = min(-2.5, min(noises)), max(7.0, max(noises))
    fig.add_trace(go.Histogram(x=noises, name="recorded noise", histnorm="probability density", marker_color=NOISE,
                               opacity=0.6, xbins=dict(start=math.floor(lo), end=math.ceil(hi), size=0.25),
                               showlegend=False, meta={"role": "noise histogram"},
                               hovertemplate="noise %{x}<br>density %{y:.3f}<extra></extra>"), row=2, col=1)
    xs = [lo + (hi - lo) * i / 200 for i in range(201)]
    fig.add_trace(go.Scatter(x=xs, y=[gumbel_density(x) for x in xs], mode="lines", name="Gumbel(0, 1) density",
                             line=dict(color=GUIDE, width=2, dash="dot"), showlegend=False,
                             meta={"role": "density"}, hovertemplate="Gumbel(0, 1) %{y:.3f}<extra></extra>"),
                  row=2, col=1)
    fig.update_xaxes(title_text="noise", row=2, col=1)
    fig.update_yaxes(title_text="density", row=2, col=1)
    fig.update_layout(template=TEMPLATE, title=dict(text=_gumbel_title(s, k, drawn, chosen)), barmode="overlay",
                      height=330 + 24 * len(drawn), bargap=0.05, margin=dict(t=90, b=70), showlegend=False)
    # no legend: the caption names the colours (a legend under a figure this tall sits far below it on a phone)
    fig.update_traces(showlegend=False)
    add_caption(fig, _gumbel_caption(drawn, chosen, left_out))
    return fig


def _gumbel_title(s: dict[str, Any], k: int, drawn: list[dict[str, Any]], chosen: int | None) -> str:
    """Who won at the step, as recorded: the chosen token, and the top logit it beat when it is not that."""
    if chosen is None:
        return f"Gumbel-max step {k}: the chosen token is not among the candidates drawn"
    winner = show_token(drawn[chosen]["text"])
    if s.get("strategy_choice") is not None:
        mine = next((c for c in drawn if c["id"] == s["strategy_choice"]), None)
        return (f"Gumbel-max step {k}: {winner} forced" + (f" (the strategy's pick: {show_token(mine['text'])})"
                                                           if mine else ""))
    top = max(drawn, key=lambda c: c["logit"])
    if drawn[chosen]["logit"] >= top["logit"]:
        return f"Gumbel-max step {k}: {winner}, the top logit, won"
    return f"Gumbel-max step {k}: {winner} won by noise over {show_token(top['text'])}"


def _gumbel_caption(drawn: list[dict[str, Any]], chosen: int | None, left_out: int) -> str:
    said = ["cyan bars: the final logit (after the chain); purple: the Gumbel noise added to it, ending at the "
            "perturbed logit (diamond)"]
    if chosen is not None:
        c = drawn[chosen]
        said.append(f"star: the chosen token, {num(c['logit'])} {'+' if c['gumbel'] >= 0 else '−'} "
                    f"{num(abs(c['gumbel']))} = {num(c['perturbed_logit'])}")
    if left_out:
        said.append(f"{left_out} candidate{'s' if left_out > 1 else ''} without a logit or noise (cut by the chain) "
                    "not drawn")
    said.append("below: every recorded noise of the run (purple); dotted: the Gumbel(0, 1) density")
    return "; ".join(said) + " · " + TOKEN_MARKS


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    out = []
    for title, make in (("Gumbel-max", gumbel_figure), ("Mirostat μ", mirostat_figure),
                        ("Adaptive-p average", adaptive_p_figure), ("Adaptive stages", adaptive_figure)):
        fig = make(trace, step)
        if fig is not None:
            out.append(View(title, fig))
    return out
