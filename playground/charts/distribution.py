"""The distribution at one step: the candidates' bars, kept vs cut, with each stage's recorded marks.

Every number drawn comes from the trace (see ``marks``): a chart never recomputes a decision, it
draws the record, over the distribution the stage received.

- the bars show the distribution that entered the first truncating stage; a bar is blue
  when the decoder kept the token (its ``kept`` flag), grey when it cut it;
- each stage listed in ``STAGE_MARKS`` gets its mark from its own record: a line at a
  probability it used (min-p's threshold, top-k's cut), its running mass with its target
  (top-p; Holtzman et al. 2019), a rank cut, or the ids it touched (the penalty). When the
  stage received another distribution than the bars (a temperature or a penalty ran in
  between, or an earlier cut renormalised), that distribution is drawn as the stage's own
  markers and the line sits on them; the marker is filled where the stage kept the token;
- the grammar stage (structured decoding) truncates too: the bars show what it received, the tokens
  it does not allow (not in its recorded ``allowed``) are crossed and their labels struck through,
  and a token it forced (the only one allowed) says so in the title;
- a token of the watch-list (the trace's ``watch``) has a bold label in its line's colour in the
  Watch-list view (charts/watch.py).

Token text is model output: it is escaped before it goes into plotly labels (plotly reads a subset
of HTML tags in labels and decodes entities). Pure: no torch, no gradio.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import (
    CHOSEN_WORD,
    TOKEN_MARKS,
    add_caption,
    as_prob,
    counted,
    num,
    prob_brief,
    show_token,
)
from playground.charts.marks import (
    STAGE_MARKS,
    Mark,
    bar_stage,
    basis_index,
    described,
    disallowed_ids,
    display_name,
    grammar_decision,
    grammar_forced,
    selection_of,
    selector_label,
    stage_summary,
    stages_of,
)
from playground.charts.overview import most_uncertain_step
from playground.charts.palette import (
    BUTTON_BACKGROUND,
    BUTTON_BORDER,
    CHOSEN,
    CUMULATIVE,
    CUT,
    FINAL,
    INK,
    KEPT,
    NOTE_BACKGROUND,
    RAW,
    TEMPLATE,
)
from playground.charts.watch import watched_colours


def step_summary(trace: dict[str, Any], step: int) -> dict[str, Any]:
    """The chosen token of ``step`` with its probabilities and rank (1 = most probable for the model)."""
    s = trace["steps"][step]
    cands = s["candidates"]
    chosen = next((c for c in cands if c["id"] == s["chosen"]), None)
    raw = sorted(cands, key=lambda c: -as_prob(c["raw_prob"]))
    rank = next((i + 1 for i, c in enumerate(raw) if c["id"] == s["chosen"]), None)
    kept = sum(1 for c in cands if c["kept"])
    return dict(text=chosen["text"] if chosen else "?", prob=as_prob(chosen["prob"]) if chosen else 0.0,
                raw_prob=as_prob(chosen["raw_prob"]) if chosen else 0.0, rank=rank, kept=kept,
                candidates=len(cands), entropy=as_prob(s.get("entropy")))


def distribution_figure(trace: dict[str, Any], step: int = 0, top: int = 20, basis: str = "chain") -> go.Figure:
    """Sorted top-``top`` candidates at ``step``, kept vs cut coloured, with each stage's recorded marks.

    Bars: the distribution that entered the first truncation, sorted; blue = kept, grey = cut (the
    decoder's flags). Each stage in ``STAGE_MARKS`` draws its record over the distribution it received
    (see the module docstring); without a running-mass stage the right axis shows the bars' cumulative
    mass. The chosen token has an amber outline and a label. ``basis`` picks the bars' distribution
    (``bar_stage``): the model's own, the one the first truncation received, or the final one.
    """
    s = trace["steps"][step]
    cands = s["candidates"]
    label, bar_probs = bar_stage(s, basis)
    order = sorted(range(len(cands)), key=lambda i: (-bar_probs[i], -as_prob(cands[i]["raw_prob"])))
    shown = order[:top]
    chosen_i = next((i for i in order if cands[i]["id"] == s["chosen"]), None)
    if chosen_i is not None and chosen_i not in shown:
        shown.append(chosen_i)  # a sampled long-tail token still gets its bar, at the end
    x = list(range(len(shown)))
    ticks = [show_token(cands[i]["text"]) for i in shown]
    if chosen_i is not None and shown[-1] == chosen_i and len(shown) > top:
        ticks[-1] = f"#{order.index(chosen_i) + 1} {ticks[-1]}"
    banned = disallowed_ids(s)  # not allowed by the grammar: struck through
    ticks = [f"<s>{t}</s>" if cands[i]["id"] in banned else t for t, i in zip(ticks, shown)]
    colours = watched_colours(trace)  # the watch-list's tokens: bold, in their line's colour in the Watch-list view
    ticks = [f'<b><span style="color:{colours[cands[i]["id"]]}">{t}</span></b>' if cands[i]["id"] in colours else t
             for t, i in zip(ticks, shown)]
    bars = _Bars(cands, shown, bar_probs, ticks)

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    use = selector_label(trace, s)
    _add_bars(fig, cands, shown, bar_probs, label, chosen_i, ticks, use)
    if stages_of(s):
        _add_chain_markers(fig, cands, shown, bar_probs, label, use)
    heights, drew_mass = _add_stage_marks(fig, s, bars)
    if not drew_mass:
        _add_cumulative(fig, bars)

    forced = bool(s.get("forced"))
    by_grammar = grammar_forced(s)
    if chosen_i is not None:
        j = shown.index(chosen_i)
        # over the first bar the word starts at its arrow: centred, its left half ran over the y axis's labels;
        # where a taller neighbour's bar runs behind it, the page's colour behind the word (theme.themed) keeps it
        # legible
        fig.add_annotation(x=j, y=bar_probs[chosen_i], text="forced" if forced or by_grammar else "chosen",
                           showarrow=True, xanchor="left" if j == 0 else "center", name=CHOSEN_WORD,
                           arrowhead=2, arrowcolor=CHOSEN, ax=0, ay=-34, font=dict(color=CHOSEN, size=14), yref="y")
    if forced:
        _add_strategy_choice(fig, s, shown, bar_probs)
    info = step_summary(trace, step)
    kept_total = _kept_total(s)
    verb = "forced" if forced else "chose"
    title = (f"Step {step}{_which_step(trace, step)}: {verb} <b>{show_token(info['text'])}</b>"
             f" · p {prob_brief(info['prob'])} · model p {prob_brief(info['raw_prob'])}"
             + (f" · {kept_total:,} kept" if kept_total is not None else ""))
    if forced:
        why = "the thinking budget" if s.get("forced") == "budget" else "a branch"
        rank = f" (the model's rank {s['model_rank']})" if s.get("model_rank") else ""
        title += (f"<br><sup>{why}{rank}: the strategy would have taken "
                  f"{show_token(s.get('strategy_choice_text', '?'))}</sup>")
    elif grammar_decision(s):  # the grammar's record: what it allowed, and the model's mass on it
        g = grammar_decision(s) or {}
        z = prob_brief(float(g["z"])) if g.get("z") is not None else "?"
        title += (f"<br><sup>forced by the grammar: the only token it allows here (the model gave it {z})</sup>"
                  if by_grammar else
                  f"<br><sup>the grammar allows {int(g.get('allowed_count') or 0):,} tokens · Z {z}</sup>")
    # every marker stays on the chart: the after-chain probabilities are renormalised, often above the bars
    top_bar = max([bar_probs[i] for i in shown] + [as_prob(cands[i]["prob"]) for i in shown]
                  + [as_prob(cands[i]["raw_prob"]) for i in shown] + heights or [1.0])
    fig.update_layout(template=TEMPLATE, title=dict(text=title), barmode="overlay", hovermode="closest", height=460,
                      xaxis=dict(tickmode="array", tickvals=x, ticktext=ticks,
                                 tickangle=-40 if len(shown) > 10 else 0, range=[-0.7, len(shown) - 0.3]),
                      legend=dict(y=1.01))
    if "<br>" in title:  # a second title line: room for it above the legend
        fig.update_layout(margin=dict(t=112))
    y_range = [0, min(1.02, top_bar * 1.18) or 1.0]
    fig.update_yaxes(title_text=label, range=y_range, secondary_y=False)
    fig.update_yaxes(title_text="cumulative", range=[0, 1.05], showgrid=False, secondary_y=True,
                     **cumulative_ticks(s))
    _add_zoom_buttons(fig, [bool(cands[i]["kept"]) for i in shown], y_range)
    add_caption(fig, distribution_caption(trace, step, basis))
    return fig


def _which_step(trace: dict[str, Any], step: int) -> str:
    """" of 20 · the most uncertain" when ``step`` is the step of the highest model entropy (the one the
    page shows after a run), else " of 20"."""
    n = len(trace.get("steps") or [])
    return f" of {n}" + (" · the most uncertain" if n > 1 and step == most_uncertain_step(trace) else "")


def distribution_caption(trace: dict[str, Any], step: int, basis: str = "chain") -> str:
    """How to read the distribution chart of ``step``, from its record: what the bars are, how many
    tokens of the vocabulary the decoder kept, each stage's recorded decision, what the selector did."""
    s = trace["steps"][step]
    label, bars = bar_stage(s, basis)
    kept = _kept_total(s)
    parts = [f"bars: {label}, blue kept, grey cut" + (f" ({kept:,} kept of the vocabulary)" if kept is not None else "")]
    for st in stages_of(s)[1:]:
        mark = STAGE_MARKS.get(st["name"])
        said = stage_summary(st) if st.get("decision") else ""
        if mark is not None and said:
            parts.append(f"{display_name(st['name'])} line: {said}")
    final = [as_prob(c["prob"]) for c in s["candidates"]]
    if stages_of(s) and any(abs(f - b) > 1e-6 for f, b in zip(final, bars)):  # drawn only where they differ
        parts.append(f"dashes: {selector_label(trace, s)}")
    if trace.get("watch"):
        parts.append("coloured bold labels: the watch-list's tokens")
    parts.append(f"H {num(s.get('raw_entropy'))} nats (model)")
    return "; ".join(parts) + " · " + TOKEN_MARKS


def _add_strategy_choice(fig: go.Figure, s: dict[str, Any], shown: list[int], bar_probs: list[float]) -> None:
    """At a forced step (a branch), the token the strategy itself would have taken, as recorded."""
    i = next((i for i in shown if s["candidates"][i]["id"] == s.get("strategy_choice")), None)
    if i is not None:
        fig.add_annotation(x=shown.index(i), y=bar_probs[i], text="strategy's pick", showarrow=True, arrowhead=2,
                           ax=0, ay=-40, arrowcolor=CUT, font=dict(color=INK, size=13), yref="y",
                           bgcolor=NOTE_BACKGROUND)


def _add_zoom_buttons(fig: go.Figure, kept: list[bool], y_range: list[float]) -> None:
    """In-figure buttons for dense steps: a log scale (bars of 0.02 and of 1e-6 both show) and a zoom
    onto the bars up to the last one the decoder kept. Plotly applies them in the browser, also on an
    exported figure; they change the view, never what is drawn."""
    buttons = [dict(label="linear", method="relayout", args=[{"yaxis.type": "linear", "yaxis.range": y_range}]),
               dict(label="log", method="relayout", args=[{"yaxis.type": "log", "yaxis.autorange": True}])]
    last = max((j for j, k in enumerate(kept) if k), default=-1)
    if 0 <= last < len(kept) - 1:
        buttons += [dict(label=f"all {len(kept)}", method="relayout",
                         args=[{"xaxis.range": [-0.7, len(kept) - 0.3]}]),
                    dict(label="kept only", method="relayout", args=[{"xaxis.range": [-0.7, last + 0.7]}])]
    fig.update_layout(updatemenus=[dict(type="buttons", direction="right", buttons=buttons, showactive=True,
                                        x=1.0, xanchor="right", y=0.93, yanchor="top", pad=dict(r=4, t=0),
                                        font=dict(size=11), bgcolor=BUTTON_BACKGROUND,
                                        bordercolor=BUTTON_BORDER)])


@dataclass
class _Bars:
    """The bars of a distribution figure: candidate indices ``shown`` at x = 0, 1, ..., heights
    ``probs`` (indexed by candidate), tick labels ``ticks`` (indexed by x)."""

    cands: list[dict[str, Any]]
    shown: list[int]
    probs: list[float]
    ticks: list[str]


@dataclass
class _StageView:
    """One stage with the stage before it (``entering``: what it received); ``on_bars``: the bars are
    that very distribution."""

    stage: dict[str, Any]
    entering: dict[str, Any]
    on_bars: bool

    @property
    def name(self) -> str:
        return self.stage["name"]

    @property
    def decision(self) -> dict[str, Any]:
        return self.stage.get("decision") or {}


def _add_bars(fig: go.Figure, cands: list[dict[str, Any]], shown: list[int], bar_probs: list[float], label: str,
              chosen_i: int | None, ticks: list[str], use: str = "after chain") -> None:
    """Two bar traces, kept (blue) and cut (grey), at the positions of ``shown``; the chosen one outlined."""
    for kept, name, color in ((True, "kept", KEPT), (False, "cut", CUT)):
        pos = [j for j, i in enumerate(shown) if bool(cands[i]["kept"]) == kept]
        if not pos and not kept:
            continue
        rows = [cands[shown[j]] for j in pos]
        fig.add_trace(go.Bar(
            x=pos, y=[bar_probs[shown[j]] for j in pos], name=f"{name} · {label}",
            marker=dict(color=color, line=dict(color=[CHOSEN if shown[j] == chosen_i else color for j in pos],
                                               width=[4 if shown[j] == chosen_i else 0 for j in pos])),
            customdata=[[c["id"], as_prob(c["prob"]), as_prob(c["raw_prob"])] for c in rows],
            text=[ticks[j] for j in pos], textposition="none",
            hovertemplate=("<b>%{text}</b> (id %{customdata[0]})<br>" + label + " %{y:.4f}<br>"
                           "model p %{customdata[2]:.4f}<br>" + use + " %{customdata[1]:.4g}<extra>"
                           + name + "</extra>")), secondary_y=False)


def _add_chain_markers(fig: go.Figure, cands: list[dict[str, Any]], shown: list[int], bar_probs: list[float],
                       label: str, use: str = "after chain") -> None:
    """Dashes at the after-chain probability (what the selector drew from, renormalised), and diamonds at
    the model's own probability when the bars show a transformed distribution."""
    x = list(range(len(shown)))
    final = [as_prob(cands[i]["prob"]) for i in shown]
    if any(abs(f - bar_probs[i]) > 1e-6 for f, i in zip(final, shown)):
        fig.add_trace(go.Scatter(x=x, y=final, mode="markers", name=use, meta={"role": "final"},
                                 marker=dict(symbol="line-ew", size=22, line=dict(width=3, color=FINAL)),
                                 hovertemplate=use + " %{y:.4g}<extra></extra>"), secondary_y=False)
    if label != "model p":
        fig.add_trace(go.Scatter(x=x, y=[as_prob(cands[i]["raw_prob"]) for i in shown], mode="markers",
                                 name="model p (raw)",
                                 marker=dict(symbol="diamond-open", size=9, color=RAW, line=dict(width=2)),
                                 hovertemplate="model p %{y:.4f}<extra></extra>"), secondary_y=False)


def _kept_total(s: dict[str, Any]) -> int | None:
    """How many tokens of the vocabulary the decoder kept at step ``s``, as recorded: the last stage's
    count, else the step's own (no stage on: the whole vocabulary), else None (not recorded)."""
    stages = stages_of(s)
    if stages:
        return int(stages[-1]["kept_count"])
    return int(s["kept_count"]) if s.get("kept_count") is not None else None


def _add_stage_marks(fig: go.Figure, s: dict[str, Any], bars: _Bars) -> tuple[list[float], bool]:
    """Every stage's mark from its own record; (the heights drawn on the left axis, whether a running
    mass took the right axis)."""
    stages = stages_of(s)
    heights: list[float] = []
    drew_mass = False
    for k in range(1, len(stages)):
        mark = STAGE_MARKS.get(stages[k]["name"])
        if mark is None or not stages[k].get("decision"):
            continue
        view = _StageView(stages[k], stages[k - 1], [as_prob(p) for p in stages[k - 1]["probs"]] == bars.probs)
        if view.stage.get("truncates") and not view.on_bars:
            heights += _add_stage_input(fig, mark, view, bars)
        heights += _DRAW[mark.kind](fig, mark, view, bars)
        drew_mass = drew_mass or mark.kind == "mass"
    return heights, drew_mass


def _add_stage_input(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """The distribution the stage received, as markers over the bars' tokens: filled where the stage
    kept the token, open where it cut it. Tokens cut before the stage are not drawn."""
    pos = [j for j, i in enumerate(bars.shown) if view.entering["kept"][i]]
    ys = [as_prob(view.entering["probs"][bars.shown[j]]) for j in pos]
    kept = [view.stage["kept"][bars.shown[j]] for j in pos]
    fig.add_trace(go.Scatter(
        x=pos, y=ys, mode="markers", name=f"p entering {display_name(view.name)}",
        meta={"stage": view.name, "role": "input"},
        marker=dict(symbol=["circle" if k else "circle-open" for k in kept], size=10, color=mark.color,
                    line=dict(width=2, color=mark.color)),
        customdata=[[bars.cands[bars.shown[j]]["id"], "kept" if k else "cut"] for j, k in zip(pos, kept)],
        text=[bars.ticks[j] for j in pos],
        hovertemplate="<b>%{text}</b><br>p entering " + display_name(view.name) + " %{y:.4f}<br>%{customdata[1]} by it"
                      "<extra></extra>"), secondary_y=False)
    return ys


def _add_level(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """A horizontal line at the probability the stage used, on the distribution it received."""
    value = view.decision.get(mark.key)
    if value is None:
        return []
    fig.add_hline(y=value, name=f"{view.name} level", line=dict(color=mark.color, dash="dot", width=2),
                  secondary_y=False, annotation=dict(text=described(mark.label, view.decision, view.name),
                                                     font=dict(color=mark.color), xanchor="right"),
                  annotation_position="top right")
    return [float(value)]


def _add_rank(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """A cut after the stage's kept bars, where the bars are its input and the kept ones lead;
    otherwise the level it cut at."""
    n = int(view.stage["kept_count"])
    flags = [bool(view.stage["kept"][i]) for i in bars.shown]
    if not (view.on_bars and flags == [j < n for j in range(len(flags))]):
        return _add_level(fig, mark, view, bars)
    if n < len(flags):
        # the label on the side of the line with more room (the bars run from -0.7 to len - 0.3): left of a
        # cut near the left edge it would run over the y axis and off the figure
        right = n - 0.5 + 0.7 < (len(flags) + 0.4) / 2
        fig.add_vline(x=n - 0.5, name=f"{view.name} rank", line=dict(color=mark.color, dash="dash", width=2),
                      annotation=dict(text=described(mark.label, view.decision, view.name), font=dict(color=mark.color)),
                      annotation_position="top right" if right else "top left")
    return []


def _add_mass(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """The stage's own running mass at each token it received (right axis), and its target line.
    Joined by a line only where the stage ranked the tokens in the bars' order."""
    curve = view.decision.get(mark.curve) or []
    pos = [j for j, i in enumerate(bars.shown)
           if view.entering["kept"][i] and i < len(curve) and curve[i] is not None]
    ys = [curve[bars.shown[j]] for j in pos]
    in_order = all(a <= b for a, b in zip(ys, ys[1:]))
    fig.add_trace(go.Scatter(
        x=pos, y=ys, mode="lines+markers" if in_order else "markers",
        name=f"running mass of {display_name(view.name)}", meta={"stage": view.name, "role": "cumulative"},
        line=dict(color=mark.color, width=2), marker=dict(size=6, color=mark.color),
        customdata=[[bars.cands[bars.shown[j]]["id"]] for j in pos],
        hovertemplate="mass up to here, in " + display_name(view.name) + "'s ranking %{y:.3f}<extra></extra>"),
        secondary_y=True)
    value = view.decision.get(mark.key)
    if value is not None:
        fig.add_hline(y=value, name=f"{view.name} mass", line=dict(color=mark.color, dash="dash", width=2),
                      secondary_y=True)
        _add_cut_beyond(fig, mark, view, bars)
    return []


def cumulative_ticks(s: dict[str, Any]) -> dict[str, list]:
    """The cumulative axis's ticks, each mass stage's target among them in its colour ('top-p 0.9'): its line
    is drawn on this axis and labelled here, where it is read (a label in the plot read on the left axis,
    as a probability). A quarter tick within 0.08 of a target gives way to it."""
    targets = []
    for stage in stages_of(s)[1:]:
        mark = STAGE_MARKS.get(stage["name"])
        if mark is not None and mark.kind == "mass" and (stage.get("decision") or {}).get(mark.key) is not None:
            value = float(stage["decision"][mark.key])
            text = f'<span style="color:{mark.color}">{display_name(stage["name"])} {value:g}</span>'
            targets.append((value, text))
    quarters = [(q, f"{q:.0%}") for q in (0, 0.25, 0.5, 0.75, 1.0)
                if all(abs(q - value) >= 0.08 for value, _ in targets)]
    ticks = sorted(quarters + targets)
    return {"tickvals": [v for v, _ in ticks], "ticktext": [t for _, t in ticks]}


def _add_cut_beyond(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> None:
    """Where the stage kept every bar shown and more: its cut lies right of the bars, said at their right end."""
    n = int(view.stage.get("kept_count") or 0)
    if n <= len(bars.shown) or not all(view.stage["kept"][i] for i in bars.shown):
        return
    fig.add_annotation(x=1, xref="x domain", xanchor="right", y=0.02, yref="y domain", yanchor="bottom",
                       showarrow=False, name=f"{view.name} cut", font=dict(color=mark.color),
                       text=f"its cut: after token {n}, past the {counted(len(bars.shown), 'bar')} shown →")


def _add_ids(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """A marker on the bars of the tokens the stage touched."""
    ids = set(view.decision.get(mark.key) or [])
    pos = [j for j, i in enumerate(bars.shown) if bars.cands[i]["id"] in ids]
    if pos:
        fig.add_trace(go.Scatter(
            x=pos, y=[bars.probs[bars.shown[j]] for j in pos], mode="markers",
            name=described(mark.label, view.decision, view.name) or display_name(view.name),
            meta={"stage": view.name, "role": "ids"},
            marker=dict(symbol="triangle-down", size=11, color=mark.color),
            customdata=[[bars.cands[bars.shown[j]]["id"]] for j in pos],
            hovertemplate="touched by " + display_name(view.name) + "<extra></extra>"), secondary_y=False)
    return []


def _add_mask(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """A cross on the bars of the tokens the stage does not allow (absent from its recorded list)."""
    allowed = set(view.decision.get(mark.key) or [])
    pos = [j for j, i in enumerate(bars.shown) if bars.cands[i]["id"] not in allowed]
    if pos:
        fig.add_trace(go.Scatter(
            x=pos, y=[bars.probs[bars.shown[j]] for j in pos], mode="markers",
            name=described(mark.label, view.decision, view.name) or f"not allowed by {display_name(view.name)}",
            meta={"stage": view.name, "role": "disallowed"},
            marker=dict(symbol="x-thin", size=13, line=dict(width=3, color=mark.color), color=mark.color),
            customdata=[[bars.cands[bars.shown[j]]["id"]] for j in pos], text=[bars.ticks[j] for j in pos],
            hovertemplate="<b>%{text}</b><br>not allowed by the " + display_name(view.name) + "<extra></extra>"),
            secondary_y=False)
    return []


_DRAW = {"level": _add_level, "rank": _add_rank, "mass": _add_mass, "ids": _add_ids, "mask": _add_mask}


def _add_cumulative(fig: go.Figure, bars: _Bars) -> None:
    """The bars' cumulative mass, when no stage drew its own running mass."""
    total, cum = 0.0, []
    for i in bars.shown:
        total += bars.probs[i]
        cum.append(min(total, 1.0))
    fig.add_trace(go.Scatter(x=list(range(len(bars.shown))), y=cum, mode="lines+markers", name="cumulative",
                             meta={"role": "cumulative"}, line=dict(color=CUMULATIVE, width=2),
                             marker=dict(size=5), hovertemplate="cumulative %{y:.3f}<extra></extra>"),
                  secondary_y=True)


# --- its bars switchable between the bases ----------------------------------------------------------

BASIS_BUTTONS = {"model": "model's own", "chain": "entering the cuts", "final": "after the samplers"}


def basis_buttons(step: dict[str, Any]) -> dict[str, str]:
    """The bases that show different recorded stages at ``step``, each with its button's label: one button
    per stage. Where two bases name one stage the first keeps it: a beam run has no cut before its
    selection, so its bars are the model's own or what entered the beam, and nothing is "entering the
    cuts" or "after the samplers"."""
    stages = stages_of(step)
    out: dict[str, str] = {}
    seen: set[int] = set()
    for b, text in BASIS_BUTTONS.items():
        index = basis_index(stages, b)
        if index in seen:
            continue
        seen.add(index)
        if index == 0:
            text = BASIS_BUTTONS["model"]
        elif index == len(stages) - 1:
            text = selection_of(stages[index]) or BASIS_BUTTONS["final"]
        out[b] = text
    return out


def switchable_distribution(trace: dict[str, Any], step: int, top: int = 20) -> go.Figure:
    """The distribution figure with buttons that switch its bars between the model's own
    distribution, the one entering the first truncation, and the one after every stage: one
    ``distribution_figure`` per basis, shown one at a time (each keeps its own marks and axes).
    Only bases that show different stages get a button (``basis_buttons``); a step without stages, or
    with one basis, has no buttons."""
    s = trace["steps"][step]
    stages = stages_of(s)
    bases = basis_buttons(s) if stages else {}
    if len(bases) < 2:
        return distribution_figure(trace, step, top)
    shown = next(b for b in bases if basis_index(stages, b) == basis_index(stages, "chain"))
    figs = {b: distribution_figure(trace, step, top, b) for b in bases}
    base = go.Figure(figs[shown])
    owner = [shown] * len(base.data)
    for b in bases:
        if b == shown:
            continue
        for t in figs[b].data:
            base.add_trace(t.update(visible=False))
            owner.append(b)
    buttons = []
    for b, text in bases.items():
        lay = figs[b].layout
        buttons.append(dict(label=text, method="update", args=[
            {"visible": [o == b for o in owner]},
            {"shapes": lay.shapes, "annotations": lay.annotations, "title.text": lay.title.text,
             "xaxis.tickvals": lay.xaxis.tickvals, "xaxis.ticktext": lay.xaxis.ticktext,
             "xaxis.range": lay.xaxis.range, "yaxis.range": lay.yaxis.range,
             "yaxis.title.text": lay.yaxis.title.text}]))
    base.update_layout(updatemenus=[*base.layout.updatemenus,  # the scale and zoom buttons stay
                                    dict(type="buttons", direction="right", active=list(bases).index(shown),
                                         buttons=buttons,
                                         x=0.0, xanchor="left", y=-0.32, yanchor="top", showactive=True,
                                         pad=dict(t=4, r=4), font=dict(size=12))],
                       margin=dict(b=110))
    return base
