"""The chain's waterfall: one step's distribution after each stage, left to right in chain order.

Each panel is coloured from that stage's kept flags, never from p == 0 (float32 softmax underflows
to 0 for tokens the decoder kept); its title holds the stage's recorded decision (``marks``). Tokens
the grammar does not allow have their labels struck through. Pure: no torch, no gradio.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import NOTES, NOTES_FLOOR, TOKEN_MARKS, add_caption, as_prob, escape, show_token
from playground.charts.marks import disallowed_ids, display_name, stage_summary, stages_of
from playground.charts.palette import CHOSEN, CLEAR, CUT, KEPT, SLOW_INK, TEMPLATE
from playground.charts.stage_warnings import by_stage, stage_warnings


def waterfall_figure(trace: dict[str, Any], step: int = 0, top: int = 12) -> go.Figure:
    """The same step's distribution after each stage of the chain, left to right in chain order.

    Rows are the step's top tokens by model probability (and the chosen one). Every colour is the
    stage's own kept flag: a blue bar is a token the decoder still kept after that stage (drawn at its
    probability, which float32 may round to 0); a grey bar is a token this stage removed, drawn at the
    probability it had before the stage. Each panel's title holds the stage's recorded decision.
    """
    s = trace["steps"][step]
    cands = s["candidates"]
    # no stage recorded (no transform on): the model's own distribution, with the step's recorded count of
    # the vocabulary kept (all of it), or no count when the trace has none (never the candidates' count)
    stages = stages_of(s) or [{"name": "raw", "probs": [as_prob(c["raw_prob"]) for c in cands],
                             "kept": [bool(c["kept"]) for c in cands], "kept_count": s.get("kept_count")}]
    order = sorted(range(len(cands)), key=lambda i: -as_prob(cands[i]["raw_prob"]))
    rows = order[:top]
    chosen_i = next((i for i in order if cands[i]["id"] == s["chosen"]), None)
    if chosen_i is not None and chosen_i not in rows:
        rows.append(chosen_i)
    banned = disallowed_ids(s)
    labels = [f"<s>{show_token(cands[i]['text'])}</s>" if cands[i]["id"] in banned else show_token(cands[i]["text"])
              for i in rows]
    selector = (trace.get("chain") or ["?"])[-1]
    titles = [f"{k + 1}. {display_name(st['name'])}<br>"
              + " · ".join(filter(None, (stage_summary(st, panel=True),
                                         "" if st["name"] == "grammar" or st.get("kept_count") is None
                                         else f"{st['kept_count']:,} kept")))
              for k, st in enumerate(stages)]
    fig = make_subplots(rows=1, cols=len(stages), shared_yaxes=True, subplot_titles=titles,
                        horizontal_spacing=0.02 if len(stages) > 4 else 0.04)
    xmax = max([as_prob(p) for st in stages for p in (st["probs"][i] for i in rows)] or [1.0])
    for k, st in enumerate(stages):
        probs = [as_prob(st["probs"][i]) for i in rows]
        kept = [bool(st["kept"][i]) for i in rows]
        before = [as_prob(stages[k - 1]["probs"][i]) for i in rows] if k else probs
        cut_here = [bool(k) and bool(stages[k - 1]["kept"][i]) and not st["kept"][i] for i in rows]
        fate = ["kept" if kp else ("removed here" if c else "removed before") for kp, c in zip(kept, cut_here)]
        fig.add_trace(go.Bar(
            y=list(range(len(rows))), x=[b if c else p for p, b, c in zip(probs, before, cut_here)],
            orientation="h", showlegend=False, name=st["name"],
            marker=dict(color=[KEPT if kp else CUT for kp in kept],
                        opacity=1.0, line=dict(color=[CHOSEN if i == chosen_i else CLEAR for i in rows],
                                               width=[3 if i == chosen_i else 0 for i in rows])),
            customdata=[[lab, p, cands[i]["id"], f] for lab, p, i, f in zip(labels, probs, rows, fate)],
            hovertemplate="<b>%{customdata[0]}</b><br>" + st["name"] + " %{customdata[1]:.4g}<br>%{customdata[3]}"
                          "<extra></extra>"),
            row=1, col=k + 1)
        # three significant digits: small ranges never show one label twice (".1f" wrote 0.1 0.1 0.1)
        fig.update_xaxes(range=[0, xmax * 1.08], showticklabels=k == 0 or len(stages) <= 3, tickformat=".3~g",
                         row=1, col=k + 1)
    for legend_name, color in (("kept after the stage", KEPT), ("removed by this stage", CUT)):
        fig.add_trace(go.Bar(x=[None], y=[None], name=legend_name, marker_color=color, showlegend=True))
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(rows))), ticktext=labels, autorange="reversed")
    for ann in fig.layout.annotations:
        ann.font = dict(size=14)
    fig.update_layout(template=TEMPLATE, barmode="overlay",
                      title=dict(text=f"Chain at step {step}: raw → {' → '.join(trace.get('chain') or [])}"
                                 if selector != "?" else f"Chain at step {step}"),
                      margin=dict(t=110), legend=dict(y=1.16), height=170 + 30 * len(rows))
    _add_stage_warnings(fig, trace, step)
    last = stages[-1].get("kept_count")
    add_caption(fig, "panels: the step's distribution after each stage, left to right; blue: kept after the stage, "
                     "grey: removed by it (drawn at its p before)"
                + (f"; {int(last):,} tokens of the vocabulary left" if last is not None else "") + " · " + TOKEN_MARKS)
    return fig


def _add_stage_warnings(fig: go.Figure, trace: dict[str, Any], step: int) -> None:
    """Under the chain, the warnings of stages that fight at this step (charts.stage_warnings)."""
    notes = [text for _, text, _ in by_stage([w for w in stage_warnings(trace) if step in w.steps])]
    if not notes:
        return
    fig.add_annotation(text="<br>".join("⚠ " + escape(n, quote=False) for n in notes), xref="paper", yref="paper",
                       x=0, y=0, xanchor="left", yanchor="top", yshift=-NOTES_FLOOR, showarrow=False, align="left",
                       name=NOTES, font=dict(color=SLOW_INK, size=13))  # placed with the caption (common.place_caption)
