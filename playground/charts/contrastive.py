"""Contrastive decoding views: expert vs amateur at one step, and where the contrast changed the pick.

Reads only the trace's JSON form (see strategies/contrastive.py): per candidate
``expert_logprob``, ``amateur_logprob``, ``score``, ``plausible``; per step
``expert_choice`` and ``alpha_threshold``. Pure: no torch, no gradio.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import TOKEN_MARKS, View, add_caption, escape, num, show_token, token_text
from playground.charts.palette import AGREE, AMATEUR, CLEAR, DISAGREE, EXPERT, MASKED, OUTLINE, OVERRIDDEN, SCORE


def is_contrastive(trace: dict[str, Any]) -> bool:
    steps = trace.get("steps") or []
    return isinstance(trace.get("contrastive"), dict) and bool(steps) and "expert_choice" in steps[0]


def _labels(cands: list[dict[str, Any]]) -> list[str]:
    """Token texts as unique axis labels (two ids can print alike)."""
    texts = [show_token(c["text"]) for c in cands]
    return [t if texts.count(t) == 1 else f"{t} #{c['id']}" for t, c in zip(texts, cands)]


def _ranked(step: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """The top candidates by expert log-probability, always with the chosen and the expert's pick."""
    cands = sorted(step["candidates"], key=lambda c: -(c["expert_logprob"] if c["expert_logprob"] is not None
                                                        else float("-inf")))
    must = {step["chosen"], step["expert_choice"]}
    head = cands[:top]
    head += [c for c in cands[top:] if c["id"] in must]
    return head


def step_figure(trace: dict[str, Any], step: int | None = None, top: int = 15) -> go.Figure:
    """One step: expert and amateur log-probabilities with the alpha line (masked tokens grey),
    and below them the scores expert - strength x amateur; the chosen and the expert's pick marked."""
    steps = trace["steps"]
    k = len(steps) - 1 if step is None else range(len(steps))[step]
    s = steps[k]
    cands = _ranked(s, top)
    x = _labels(cands)
    ok = [c["plausible"] for c in cands]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("expert vs amateur log-probability", "contrastive score"))
    fig.add_bar(x=x, y=[c["expert_logprob"] for c in cands], name="expert", row=1, col=1,
                marker_color=[EXPERT if p else MASKED for p in ok])
    fig.add_bar(x=x, y=[c["amateur_logprob"] for c in cands], name="amateur", row=1, col=1,
                marker_color=[AMATEUR if p else MASKED for p in ok], marker_pattern_shape="/")
    fig.add_bar(x=x, y=[c["score"] for c in cands], name="score", row=2, col=1,
                marker_color=[SCORE if p else MASKED for p in ok],
                marker_line_color=[OUTLINE if c["id"] == s["chosen"] else CLEAR for c in cands],
                marker_line_width=2,
                hovertext=["plausible" if p else "masked: below the alpha line" for p in ok])
    if s.get("alpha_threshold") is not None:
        fig.add_hline(y=s["alpha_threshold"], line_dash="dash", line_color=OUTLINE, row=1, col=1,
                      annotation_text=f"alpha = {trace['contrastive']['alpha']:g}", annotation_position="top right")
    _mark(fig, x, cands, s["chosen"], "chosen", 2)
    if s["expert_choice"] != s["chosen"]:
        _mark(fig, x, cands, s["expert_choice"], "expert greedy", 1)
    c = trace["contrastive"]
    # three rows above the plot, each its own: the title, the legend, the upper panel's title (the legend
    # 30 px over the plot's top, the panel title's 20 px under it)
    height, top, bottom = 520, 110, 60
    fig.update_layout(barmode="group", title=f"step {k}: {c['expert']} vs {c['amateur']}, "
                      f"strength {c['strength']:g}; grey = outside the plausible set", height=height,
                      margin=dict(t=top, b=bottom),
                      legend=dict(orientation="h", y=1 + 30 / (height - top - bottom), yanchor="bottom",
                                  x=1.0, xanchor="right"))
    chosen = next(x for x in s["candidates"] if x["id"] == s["chosen"])
    add_caption(fig, f"top: expert and amateur log-probabilities (nats); dashed line: the plausibility cut (alpha "
                     f"{c['alpha']:g}) at {num(s.get('alpha_threshold'))}, {s.get('plausible_count', '?')} plausible; bottom: "
                     f"score = expert − strength {c['strength']:g} × amateur, grey outside; chosen "
                     f"{show_token(chosen['text'])} score {num(chosen['score'])} · {TOKEN_MARKS}")
    fig.update_yaxes(title_text="logprob", row=1, col=1)
    fig.update_yaxes(title_text="score", row=2, col=1)
    return fig


def _mark(fig: go.Figure, x: list[str], cands: list[dict[str, Any]], token_id: int, text: str, row: int) -> None:
    for label, c in zip(x, cands):
        if c["id"] == token_id:
            y = c["score"] if row == 2 else c["expert_logprob"]
            fig.add_annotation(x=label, y=y if y is not None else 0, text=text, showarrow=True, arrowhead=2,
                               row=row, col=1)


def _disagreements(trace: dict[str, Any]) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """(step index, chosen candidate, expert's candidate) for every step."""
    out = []
    for k, s in enumerate(trace["steps"]):
        by_id = {c["id"]: c for c in s["candidates"]}
        out.append((k, by_id[s["chosen"]], by_id[s["expert_choice"]]))
    return out


def run_figure(trace: dict[str, Any]) -> go.Figure:
    """Over the run: how far below the expert's favourite the contrastive pick was, in expert logprob;
    0 where they agree, red where they differ."""
    rows = _disagreements(trace)
    gap = [(ch["expert_logprob"] or 0.0) - (ex["expert_logprob"] or 0.0) for _, ch, ex in rows]
    differ = [ch["id"] != ex["id"] for _, ch, ex in rows]
    hover = [f"step {k}: contrastive {show_token(ch['text'])}, expert greedy {show_token(ex['text'])}" for k, ch, ex in rows]
    fig = go.Figure(go.Scatter(x=[k for k, _, _ in rows], y=gap, mode="markers+lines", hovertext=hover,
                               line_color=AGREE, marker_color=[DISAGREE if d else AGREE for d in differ],
                               marker_size=[10 if d else 6 for d in differ]))
    fig.update_layout(title=f"contrastive vs expert greedy: {sum(differ)} of {len(rows)} steps differ",
                      xaxis_title="step", yaxis_title="expert logprob of the pick - expert top logprob")
    add_caption(fig, f"each step: how far below the expert's favourite the contrastive pick was (nats of expert "
                     f"log-probability); red: the {sum(differ)} steps where they differ, 0 where they agree")
    return fig


def text_html(trace: dict[str, Any]) -> str:
    """The generated text; tokens where contrastive overrode expert greedy are highlighted, with the
    expert's pick in the tooltip. Token text is model output: escaped."""
    parts = []
    for k, ch, ex in _disagreements(trace):
        text = escape(ch["text"])
        if ch["id"] == ex["id"]:
            parts.append(f"<span>{text}</span>")
        else:
            tip = escape(f"step {k}: expert greedy would pick {token_text(ex['text'])}")
            parts.append(f'<span title="{tip}" style="background:{OVERRIDDEN}">{text}</span>')
    return "<div style='white-space:pre-wrap'>" + "".join(parts) + "</div>"


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """The contrastive views of ``trace`` at ``step`` (default: the last step); [] for other traces."""
    if not is_contrastive(trace):
        return []
    k = len(trace["steps"]) - 1 if step is None else range(len(trace["steps"]))[step]
    return [View(f"Contrastive step {k}: expert vs amateur", step_figure(trace, k)),
            View("Contrastive vs expert greedy over the run", run_figure(trace)),
            View("Where the contrast changed the pick", html=text_html(trace))]
