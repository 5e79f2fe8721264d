"""Trace (its JSON dict) -> plotly figures and the coloured-text HTML. Pure: no torch, no gradio.

Every number drawn comes from the trace: candidate probabilities, and per step the
chain's stages (``steps[i]["stages"]``: "raw" first, then one per transform in chain
order), each with its distribution over the candidates, its kept flags and the decision
it made on the distribution it received (its ``decision``). A chart never recomputes a
decision: it draws the record, over the distribution the stage received.

- the bars show the distribution that entered the first truncating stage; a bar is blue
  when the decoder kept the token (its ``kept`` flag), grey when it cut it;
- each stage listed in ``STAGE_MARKS`` gets its mark from its own record: a line at a
  probability it used (min-p's threshold, top-k's cut), its running mass with its target
  (top-p; Holtzman et al. 2019), a rank cut, or the ids it touched (the penalty). When the
  stage received another distribution than the bars (a temperature or a penalty ran in
  between, or an earlier cut renormalised), that distribution is drawn as the stage's own
  markers and the line sits on them; the marker is filled where the stage kept the token;
- the waterfall colours each panel from that stage's kept flags, never from p == 0
  (float32 softmax underflows to 0 for tokens the decoder kept);
- the grammar stage (structured decoding) truncates too: the bars show what it received, the tokens
  it does not allow (not in its recorded ``allowed``) are crossed and their labels struck through,
  and a token it forced (the only one allowed) says so in the title and in the text.

A new stage gets its marks by recording its decision and adding one ``Mark`` here.

Token text is model output: it is escaped before it goes into HTML or plotly labels
(plotly reads a subset of HTML tags in labels and decodes entities).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import (TOKEN_MARKS, add_caption, escape, num, prob_text, show_token,  # noqa: F401
                                      token_text, wrap)
from playground.charts.stage_warnings import stage_warnings
from playground.charts.palette import (BANNED, BUTTON_BACKGROUND, BUTTON_BORDER, CHOSEN, CLEAR, CONFIDENT, CUMULATIVE,
                                       CUT, DISALLOWED, ENTROPY, EPSILON, ETA, FINAL, GRAMMAR_FORCED, INK, KEPT,
                                       MIN_P, MIROSTAT, NOTE_BACKGROUND,
                                       NSIGMA, PENALISED, RAW, SLOW_INK, SURPRISING, TEMPLATE, TOP_K, TYPICAL, UNSURE,
                                       XTC, rgb, rgba)


@dataclass(frozen=True)
class Mark:
    """How one stage's recorded decision is drawn over the distribution that stage received.

    kind:
      "level": a horizontal line at ``decision[key]``, a probability on the stage's input;
      "mass": the stage's running mass (``decision[curve]``, one value per candidate) on the
              right axis, with a line at ``decision[key]``;
      "rank": a vertical cut after the stage's ``kept_count`` bars when the bars are the stage's
              input and the tokens it kept are the leading bars; else a "level" line at ``decision[key]``;
      "ids": the bars of the candidate ids listed in ``decision[key]`` are marked;
      "mask": the bars of the candidate ids *not* listed in ``decision[key]`` are crossed (a grammar:
              its record lists what it allows).
    label: the line's text, formatted with the decision's fields; summary: the waterfall panel's.
    cuts: an "ids" stage that removes the tokens it marks (a ban) rather than reweighting them.
    """

    kind: str
    key: str
    label: str
    summary: str
    color: str
    curve: str = ""
    cuts: bool = False

    @property
    def truncates(self) -> bool:
        return self.kind != "ids" or self.cuts


# Stages drawn from their decision; a stage without an entry still gets its kept flags drawn.
STAGE_MARKS: dict[str, Mark] = {
    "penalty": Mark("ids", "ids", "penalised ÷/× {penalty:g}", "×{penalty:g} on {touched} ids", PENALISED),
    "top_k": Mark("rank", "cut_prob", "top-k {k} (p ≥ {cut_prob:.3g})", "k {k}", TOP_K),
    "top_p": Mark("mass", "p", "top-p {p:g}", "p {p:g} · mass {mass:.3f}", CUMULATIVE, curve="cumulative"),
    "min_p": Mark("level", "threshold", "min-p {min_p:g} × top {top_prob:.3f} = {threshold:.3g}",
                  "p ≥ {threshold:.3g}", MIN_P),
    "typical_p": Mark("mass", "p", "typical {p:g} (H {entropy:.2f} nats)", "mass {p:g} · H {entropy:.2f}", TYPICAL,
                      curve="cumulative"),
    "epsilon": Mark("level", "threshold", "ε {epsilon:g}", "p ≥ {threshold:.3g}", EPSILON),
    "eta": Mark("level", "threshold", "η: min({eta:g}, √η·e^−H) = {threshold:.3g}", "p ≥ {threshold:.3g}",
                ETA),
    "top_nsigma": Mark("level", "threshold_prob", "top-nσ: logit ≥ max − {n:g}σ (p ≥ {threshold_prob:.3g})",
                       "{n:g}σ = {sigma:.3g} · p ≥ {threshold_prob:.3g}", NSIGMA),
    # XTC removes what lies at or above its line (but the least probable of those), when its coin says so
    "xtc": Mark("level", "threshold", "XTC removes p ≥ {threshold:g} · coin {coin:.2f} · acted {acted}",
                "coin {coin:.2f} · removed {removed}", XTC),
    "mirostat": Mark("level", "threshold", "mirostat μ {mu:.2f} bits: p ≥ 2^−μ = {threshold:.3g}",
                     "μ {mu:.2f} → {mu_after:.2f}", MIROSTAT),
    "dry": Mark("ids", "ids", "DRY −{multiplier:g}×{base:g}^(n−{allowed_length})", "longest repeat {match_length}",
                PENALISED),
    "no_repeat_ngram": Mark("ids", "ids", "banned: would repeat a {n}-gram", "{banned} banned", BANNED, cuts=True),
    "top_h": Mark("rank", "cut_prob", "top-H {h:g}: entropy kept ≤ {tau:.3g} nats (p ≥ {cut_prob:.3g})",
                  "τ {tau:.3g} of H {entropy:.3g}", ENTROPY),
    "p_less": Mark("level", "threshold", "p-less: p ≥ Σp² = {threshold:.3g}", "p ≥ Σp² = {threshold:.3g}",
                   EPSILON),
    "word_bias": Mark("ids", "ids", "biased by word", "{banned} banned", BANNED, cuts=True),
    "grammar": Mark("mask", "allowed", "not allowed by the grammar",
                    "{allowed_count:,} allowed · Z {z:.3g}", DISALLOWED),
}
STAGE_SUMMARIES = {"temperature": "T {t:g}",  # waterfall titles of the stages that draw no mark
                   "dynamic_temperature": "T {t:.3g} · H/log N {normalized:.2f}",
                   "adaptive_p": "aims at p {adapted:.3f} · average {average:.3f}"}


# --- small helpers --------------------------------------------------------------------------------

def prob_color(p: float | None, alpha: float = 0.42) -> str:
    """Red (surprising) through amber to green (confident) for a probability in [0, 1]."""
    p = 0.0 if p is None or math.isnan(p) else min(1.0, max(0.0, p))
    stops = [(0.0, rgb(SURPRISING)), (0.5, rgb(UNSURE)), (1.0, rgb(CONFIDENT))]
    for (p0, c0), (p1, c1) in zip(stops, stops[1:]):
        if p <= p1:
            w = (p - p0) / (p1 - p0)
            r, g, b = (round(a + (b_ - a) * w) for a, b_ in zip(c0, c1))
            return f"rgba({r}, {g}, {b}, {alpha})"
    return rgba(CONFIDENT, alpha)


def _prob(x: float | None) -> float:
    return 0.0 if x is None else float(x)


def _fmt(p: float) -> str:
    if p == 0:
        return "0"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _stages(step: dict[str, Any]) -> list[dict[str, Any]]:
    return list(step.get("stages") or [])


def grammar_decision(step: dict[str, Any]) -> dict[str, Any] | None:
    """The grammar stage's recorded decision at ``step``; None when its chain has no grammar."""
    return next((st.get("decision") or {} for st in _stages(step) if st["name"] == "grammar"), None)


def disallowed_ids(step: dict[str, Any]) -> set[int]:
    """The step's candidate ids the grammar stage did not allow (its record lists those it allows)."""
    d = grammar_decision(step)
    if d is None or d.get("allowed") is None:
        return set()
    allowed = set(d["allowed"])
    return {c["id"] for c in step["candidates"] if c["id"] not in allowed}


def grammar_forced(step: dict[str, Any]) -> bool:
    """The grammar allowed exactly one token at ``step`` (as recorded)."""
    return bool((grammar_decision(step) or {}).get("forced"))


def _truncates(stage: dict[str, Any]) -> bool:
    mark = STAGE_MARKS.get(stage["name"])
    return mark is not None and mark.truncates


def _bar_index(stages: list[dict[str, Any]]) -> int:
    """The stage whose output the bars show: the one before the first truncating stage (the last one
    when none truncates)."""
    first_cut = next((i for i, st in enumerate(stages) if i and _truncates(st)), len(stages))
    return first_cut - 1


# what the selector did with the final distribution (the dashes of the distribution chart), per selector
SELECTOR_USE = {"multinomial": "after chain (sampled from)", "greedy": "after chain (argmax taken)",
                "gumbel": "after chain (Gumbel-max over it)",
                "beam": "entered the beam (p adds to the beam score)",
                "gumbel-top-k": "entered the beam (Gumbel-top-k)",
                "contrastive": "contrastive scores as p (the argmax is taken)"}


def selector_label(trace: dict[str, Any], step: dict[str, Any] | None = None) -> str:
    """The name of the final distribution, by what the recorded selector did with it: sampling draws
    from it, greedy takes its argmax, beam search keeps the tokens that entered the beam."""
    names = [st["name"] for st in _stages(step or {})][-1:] + list(reversed(trace.get("chain") or []))
    return next((SELECTOR_USE[n] for n in names if n in SELECTOR_USE), "after chain")


BASES = ("chain", "model", "final")  # what the distribution chart's bars show; see bar_stage


def bar_stage(step: dict[str, Any], basis: str = "chain") -> tuple[str, list[float]]:
    """(label, probs over the step's candidates) of the distribution the bars show.

    ``basis`` "chain": the one that entered the first truncation (without any truncation, the final
    one); "model": the model's own distribution; "final": the one after every stage (what the
    selector drew from). Without stages (greedy, or no transform active) it is the model's own.
    """
    stages = _stages(step)
    if not stages:
        return "model p", [_prob(c["raw_prob"]) for c in step["candidates"]]
    index = {"model": 0, "final": len(stages) - 1}.get(basis, _bar_index(stages))
    entering = stages[index]
    label = ("model p" if entering["name"] == "raw" else SELECTOR_USE.get(entering["name"])
             or f"p after {_display(entering['name'])}")
    return label, [_prob(p) for p in entering["probs"]]


def _display(name: str) -> str:
    return name.replace("_", "-")


def _described(template: str, decision: dict[str, Any]) -> str:
    """``template`` filled from a decision; empty when a field it names is missing or null."""
    try:
        return template.format(**decision)
    except (KeyError, TypeError, ValueError):
        return ""


def step_summary(trace: dict[str, Any], step: int) -> dict[str, Any]:
    """The chosen token of ``step`` with its probabilities and rank (1 = most probable for the model)."""
    s = trace["steps"][step]
    cands = s["candidates"]
    chosen = next((c for c in cands if c["id"] == s["chosen"]), None)
    raw = sorted(cands, key=lambda c: -_prob(c["raw_prob"]))
    rank = next((i + 1 for i, c in enumerate(raw) if c["id"] == s["chosen"]), None)
    kept = sum(1 for c in cands if c["kept"])
    return dict(text=chosen["text"] if chosen else "?", prob=_prob(chosen["prob"]) if chosen else 0.0,
                raw_prob=_prob(chosen["raw_prob"]) if chosen else 0.0, rank=rank, kept=kept,
                candidates=len(cands), entropy=_prob(s.get("entropy")))


# --- 1. the distribution at one step --------------------------------------------------------------

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
    order = sorted(range(len(cands)), key=lambda i: (-bar_probs[i], -_prob(cands[i]["raw_prob"])))
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
    bars = _Bars(cands, shown, bar_probs, ticks)

    fig = make_subplots(specs=[[{"secondary_y": True}]])
    use = selector_label(trace, s)
    _add_bars(fig, cands, shown, bar_probs, label, chosen_i, ticks, use)
    if _stages(s):
        _add_chain_markers(fig, cands, shown, bar_probs, label, use)
    heights, drew_mass = _add_stage_marks(fig, s, bars)
    if not drew_mass:
        _add_cumulative(fig, bars)

    forced = bool(s.get("forced"))
    by_grammar = grammar_forced(s)
    if chosen_i is not None:
        j = shown.index(chosen_i)
        fig.add_annotation(x=j, y=bar_probs[chosen_i], text="forced" if forced or by_grammar else "chosen",
                           showarrow=True,
                           arrowhead=2, arrowcolor=CHOSEN, ax=0, ay=-34, font=dict(color=CHOSEN, size=14), yref="y")
    if forced:
        _add_strategy_choice(fig, s, shown, bar_probs)
    info = step_summary(trace, step)
    kept_total = _kept_total(s)
    verb = "forced" if forced else "chose"
    title = (f"Step {step}{_which_step(trace, step)}: {verb} <b>{show_token(info['text'])}</b> · p {_fmt(info['prob'])}"
             f" · model p {_fmt(info['raw_prob'])}" + (f" · {kept_total:,} kept" if kept_total is not None else ""))
    if forced:
        title += f"<br><sup>a branch: the strategy would have taken {show_token(s.get('strategy_choice_text', '?'))}</sup>"
    elif grammar_decision(s):  # the grammar's record: what it allowed, and the model's mass on it
        g = grammar_decision(s) or {}
        z = _fmt(float(g["z"])) if g.get("z") is not None else "?"
        title += (f"<br><sup>forced by the grammar: the only token it allows here (the model gave it {z})</sup>"
                  if by_grammar else
                  f"<br><sup>the grammar allows {int(g.get('allowed_count') or 0):,} tokens · Z {z}</sup>")
    # every marker stays on the chart: the after-chain probabilities are renormalised, often above the bars
    top_bar = max([bar_probs[i] for i in shown] + [_prob(cands[i]["prob"]) for i in shown]
                  + [_prob(cands[i]["raw_prob"]) for i in shown] + heights or [1.0])
    fig.update_layout(template=TEMPLATE, title=dict(text=title), barmode="overlay", hovermode="closest", height=460,
                      xaxis=dict(tickmode="array", tickvals=x, ticktext=ticks,
                                 tickangle=-40 if len(shown) > 10 else 0, range=[-0.7, len(shown) - 0.3]),
                      legend=dict(y=1.01))
    if "<br>" in title:  # a second title line: room for it above the legend
        fig.update_layout(margin=dict(t=112))
    y_range = [0, min(1.02, top_bar * 1.18) or 1.0]
    fig.update_yaxes(title_text=label, range=y_range, secondary_y=False)
    fig.update_yaxes(title_text="cumulative", range=[0, 1.05], showgrid=False, secondary_y=True,
                     tickformat=".0%", tickvals=[0, 0.25, 0.5, 0.75, 1.0])
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
    for st in _stages(s)[1:]:
        mark = STAGE_MARKS.get(st["name"])
        said = _summary(st) if st.get("decision") else ""
        if mark is not None and said:
            parts.append(f"{_display(st['name'])} line: {said}")
    final = [_prob(c["prob"]) for c in s["candidates"]]
    if _stages(s) and any(abs(f - b) > 1e-6 for f, b in zip(final, bars)):  # drawn only where they differ
        parts.append(f"dashes: {selector_label(trace, s)}")
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
            customdata=[[c["id"], _prob(c["prob"]), _prob(c["raw_prob"])] for c in rows],
            text=[ticks[j] for j in pos], textposition="none",
            hovertemplate=("<b>%{text}</b> (id %{customdata[0]})<br>" + label + " %{y:.4f}<br>"
                           "model p %{customdata[2]:.4f}<br>" + use + " %{customdata[1]:.4g}<extra>"
                           + name + "</extra>")), secondary_y=False)


def _add_chain_markers(fig: go.Figure, cands: list[dict[str, Any]], shown: list[int], bar_probs: list[float],
                       label: str, use: str = "after chain") -> None:
    """Dashes at the after-chain probability (what the selector drew from, renormalised), and diamonds at
    the model's own probability when the bars show a transformed distribution."""
    x = list(range(len(shown)))
    final = [_prob(cands[i]["prob"]) for i in shown]
    if any(abs(f - bar_probs[i]) > 1e-6 for f, i in zip(final, shown)):
        fig.add_trace(go.Scatter(x=x, y=final, mode="markers", name=use, meta={"role": "final"},
                                 marker=dict(symbol="line-ew", size=22, line=dict(width=3, color=FINAL)),
                                 hovertemplate=use + " %{y:.4g}<extra></extra>"), secondary_y=False)
    if label != "model p":
        fig.add_trace(go.Scatter(x=x, y=[_prob(cands[i]["raw_prob"]) for i in shown], mode="markers",
                                 name="model p (raw)",
                                 marker=dict(symbol="diamond-open", size=9, color=RAW, line=dict(width=2)),
                                 hovertemplate="model p %{y:.4f}<extra></extra>"), secondary_y=False)


def _kept_total(s: dict[str, Any]) -> int | None:
    """How many tokens of the vocabulary the decoder kept at step ``s``, as recorded: the last stage's
    count, else the step's own (no stage on: the whole vocabulary), else None (not recorded)."""
    stages = _stages(s)
    if stages:
        return int(stages[-1]["kept_count"])
    return int(s["kept_count"]) if s.get("kept_count") is not None else None


def _add_stage_marks(fig: go.Figure, s: dict[str, Any], bars: _Bars) -> tuple[list[float], bool]:
    """Every stage's mark from its own record; (the heights drawn on the left axis, whether a running
    mass took the right axis)."""
    stages = _stages(s)
    heights: list[float] = []
    drew_mass = False
    for k in range(1, len(stages)):
        mark = STAGE_MARKS.get(stages[k]["name"])
        if mark is None or not stages[k].get("decision"):
            continue
        view = _StageView(stages[k], stages[k - 1], [_prob(p) for p in stages[k - 1]["probs"]] == bars.probs)
        if mark.truncates and not view.on_bars:
            heights += _add_stage_input(fig, mark, view, bars)
        heights += _DRAW[mark.kind](fig, mark, view, bars)
        drew_mass = drew_mass or mark.kind == "mass"
    return heights, drew_mass


def _add_stage_input(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """The distribution the stage received, as markers over the bars' tokens: filled where the stage
    kept the token, open where it cut it. Tokens cut before the stage are not drawn."""
    pos = [j for j, i in enumerate(bars.shown) if view.entering["kept"][i]]
    ys = [_prob(view.entering["probs"][bars.shown[j]]) for j in pos]
    kept = [view.stage["kept"][bars.shown[j]] for j in pos]
    fig.add_trace(go.Scatter(
        x=pos, y=ys, mode="markers", name=f"p entering {_display(view.name)}",
        meta={"stage": view.name, "role": "input"},
        marker=dict(symbol=["circle" if k else "circle-open" for k in kept], size=10, color=mark.color,
                    line=dict(width=2, color=mark.color)),
        customdata=[[bars.cands[bars.shown[j]]["id"], "kept" if k else "cut"] for j, k in zip(pos, kept)],
        text=[bars.ticks[j] for j in pos],
        hovertemplate="<b>%{text}</b><br>p entering " + _display(view.name) + " %{y:.4f}<br>%{customdata[1]} by it"
                      "<extra></extra>"), secondary_y=False)
    return ys


def _add_level(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """A horizontal line at the probability the stage used, on the distribution it received."""
    value = view.decision.get(mark.key)
    if value is None:
        return []
    fig.add_hline(y=value, name=f"{view.name} level", line=dict(color=mark.color, dash="dot", width=2),
                  secondary_y=False, annotation=dict(text=_described(mark.label, view.decision),
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
        fig.add_vline(x=n - 0.5, name=f"{view.name} rank", line=dict(color=mark.color, dash="dash", width=2),
                      annotation=dict(text=_described(mark.label, view.decision), font=dict(color=mark.color)),
                      annotation_position="top left")
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
        name=f"running mass of {_display(view.name)}", meta={"stage": view.name, "role": "cumulative"},
        line=dict(color=mark.color, width=2), marker=dict(size=6, color=mark.color),
        customdata=[[bars.cands[bars.shown[j]]["id"]] for j in pos],
        hovertemplate="mass up to here, in " + _display(view.name) + "'s ranking %{y:.3f}<extra></extra>"),
        secondary_y=True)
    value = view.decision.get(mark.key)
    if value is not None:
        fig.add_hline(y=value, name=f"{view.name} mass", line=dict(color=mark.color, dash="dash", width=2),
                      secondary_y=True)
        # at the left end: the right end holds the cumulative axis's ticks and title
        fig.add_annotation(x=0, xref="paper", xanchor="left", y=value, yref="y2", yanchor="bottom",
                           showarrow=False, text=_described(mark.label, view.decision), font=dict(color=mark.color))
    return []


def _add_ids(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """A marker on the bars of the tokens the stage touched."""
    ids = set(view.decision.get(mark.key) or [])
    pos = [j for j, i in enumerate(bars.shown) if bars.cands[i]["id"] in ids]
    if pos:
        fig.add_trace(go.Scatter(
            x=pos, y=[bars.probs[bars.shown[j]] for j in pos], mode="markers",
            name=_described(mark.label, view.decision) or _display(view.name),
            meta={"stage": view.name, "role": "ids"},
            marker=dict(symbol="triangle-down", size=11, color=mark.color),
            customdata=[[bars.cands[bars.shown[j]]["id"]] for j in pos],
            hovertemplate="touched by " + _display(view.name) + "<extra></extra>"), secondary_y=False)
    return []


def _add_mask(fig: go.Figure, mark: Mark, view: _StageView, bars: _Bars) -> list[float]:
    """A cross on the bars of the tokens the stage does not allow (absent from its recorded list)."""
    allowed = set(view.decision.get(mark.key) or [])
    pos = [j for j, i in enumerate(bars.shown) if bars.cands[i]["id"] not in allowed]
    if pos:
        fig.add_trace(go.Scatter(
            x=pos, y=[bars.probs[bars.shown[j]] for j in pos], mode="markers",
            name=_described(mark.label, view.decision) or f"not allowed by {_display(view.name)}",
            meta={"stage": view.name, "role": "disallowed"},
            marker=dict(symbol="x-thin", size=13, line=dict(width=3, color=mark.color), color=mark.color),
            customdata=[[bars.cands[bars.shown[j]]["id"]] for j in pos], text=[bars.ticks[j] for j in pos],
            hovertemplate="<b>%{text}</b><br>not allowed by the " + _display(view.name) + "<extra></extra>"),
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


# --- 2. the chain waterfall -------------------------------------------------------------------------

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
    stages = _stages(s) or [{"name": "raw", "probs": [_prob(c["raw_prob"]) for c in cands],
                             "kept": [bool(c["kept"]) for c in cands], "kept_count": s.get("kept_count")}]
    order = sorted(range(len(cands)), key=lambda i: -_prob(cands[i]["raw_prob"]))
    rows = order[:top]
    chosen_i = next((i for i in order if cands[i]["id"] == s["chosen"]), None)
    if chosen_i is not None and chosen_i not in rows:
        rows.append(chosen_i)
    banned = disallowed_ids(s)
    labels = [f"<s>{show_token(cands[i]['text'])}</s>" if cands[i]["id"] in banned else show_token(cands[i]["text"])
              for i in rows]
    selector = (trace.get("chain") or ["?"])[-1]
    titles = [f"{k + 1}. {_display(st['name'])}<br>"
              + " · ".join(filter(None, (_summary(st), "" if st["name"] == "grammar" or st.get("kept_count") is None
                                       else f"{st['kept_count']:,} kept")))
              for k, st in enumerate(stages)]
    fig = make_subplots(rows=1, cols=len(stages), shared_yaxes=True, subplot_titles=titles,
                        horizontal_spacing=0.02 if len(stages) > 4 else 0.04)
    xmax = max([_prob(p) for st in stages for p in (st["probs"][i] for i in rows)] or [1.0])
    for k, st in enumerate(stages):
        probs = [_prob(st["probs"][i]) for i in rows]
        kept = [bool(st["kept"][i]) for i in rows]
        before = [_prob(stages[k - 1]["probs"][i]) for i in rows] if k else probs
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
    notes = [w.text for w in stage_warnings(trace) if step in w.steps]
    if not notes:
        return
    fig.add_annotation(text="<br>".join("⚠ " + escape(n, quote=False) for n in notes), xref="paper", yref="paper",
                       x=0, y=0, xanchor="left", yanchor="top", yshift=-36, showarrow=False, align="left",
                       name="stage warnings", font=dict(color=SLOW_INK, size=13))
    fig.update_layout(margin=dict(b=60 + 20 * len(notes)), height=fig.layout.height + 20 * len(notes))


def _summary(stage: dict[str, Any]) -> str:
    """A stage's recorded decision in a few words, for its panel title."""
    mark = STAGE_MARKS.get(stage["name"])
    template = mark.summary if mark else STAGE_SUMMARIES.get(stage["name"], "")
    return _described(template, stage.get("decision") or {})


# --- 3. chosen-token probability and entropy over all steps ----------------------------------------

def overview_figure(trace: dict[str, Any], selected: int | None = None) -> go.Figure:
    """Per step: the chosen token's model probability (bars, coloured like the text) and the entropy
    of the model's distribution and of the distribution sampled from (right axis, nats).
    ``selected`` is shaded; clicking a bar selects its step in the page."""
    tokens = trace.get("tokens") or []
    steps = trace.get("steps") or []
    n = len(tokens)
    x = list(range(n))
    p_raw = [math.exp(t["raw_logprob"]) if t.get("raw_logprob") is not None else 0.0 for t in tokens]
    p_final = [math.exp(t["logprob"]) if t.get("logprob") is not None else 0.0 for t in tokens]
    labels = [show_token(t["text"]) for t in tokens]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=x, y=p_raw, name="model p of chosen", marker=dict(color=[prob_color(p, 0.9) for p in p_raw]),
                         customdata=[[lab, pf] for lab, pf in zip(labels, p_final)],
                         hovertemplate="step %{x}: <b>%{customdata[0]}</b><br>model p %{y:.3f}"
                                       "<br>after chain %{customdata[1]:.3f}<extra></extra>"), secondary_y=False)
    if len(steps) == n and n:
        fig.add_trace(go.Scatter(x=x, y=[_prob(s.get("raw_entropy")) for s in steps], mode="lines",
                                 name="model entropy", line=dict(color=ENTROPY, width=2.5),
                                 hovertemplate="model entropy %{y:.2f} nats<extra></extra>"), secondary_y=True)
        if any(s.get("stages") for s in steps):
            fig.add_trace(go.Scatter(x=x, y=[_prob(s.get("entropy")) for s in steps], mode="lines",
                                     name="entropy after chain", line=dict(color=ENTROPY, width=2, dash="dot"),
                                     hovertemplate="after chain %{y:.2f} nats<extra></extra>"), secondary_y=True)
    if selected is not None and 0 <= selected < n:
        fig.add_vrect(x0=selected - 0.5, x1=selected + 0.5, fillcolor=CHOSEN, opacity=0.22, line_width=0)
    use_words = 0 < n <= 32
    fig.update_layout(template=TEMPLATE, title=dict(text="Chosen-token probability and entropy per step"),
                      bargap=0.12, hovermode="x unified" if n > 60 else "closest",
                      xaxis=dict(title_text=None if use_words else "step",
                                 tickmode="array" if use_words else "auto",
                                 tickvals=x if use_words else None, ticktext=labels if use_words else None,
                                 tickangle=-40 if use_words and n > 10 else 0),
                      margin=dict(t=80, b=50), height=320)
    fig.update_yaxes(title_text="p(chosen)", range=[0, 1.05], secondary_y=False)
    ent_max = max([_prob(s.get("raw_entropy")) for s in steps] + [_prob(s.get("entropy")) for s in steps] + [0.5])
    fig.update_yaxes(title_text="entropy (nats)", range=[0, ent_max * 1.1], showgrid=False, secondary_y=True,
                     tickformat=".1f", nticks=6)
    if len(steps) == n and n:
        top = most_uncertain_step(trace)
        add_caption(fig, "bars: the model's p of each chosen token (coloured like the text); line: the model's "
                         "entropy in nats" + ("; dotted: after the chain" if any(s.get("stages") for s in steps) else "")
                    + f"; most uncertain: step {top} (H {num(steps[top].get('raw_entropy'))} nats)")
    return fig


def most_uncertain_step(trace: dict[str, Any]) -> int:
    """The step whose model distribution had the highest entropy (0 for an empty trace)."""
    steps = trace.get("steps") or []
    if not steps:
        return 0
    return max(range(len(steps)), key=lambda i: (_prob(steps[i].get("raw_entropy")), -i))


# --- the generated text, coloured by the chosen token's probability ---------------------------------

def token_html(trace: dict[str, Any], selected: int | None = None, show_prompt: bool = False,
               alternatives: int = 4) -> str:
    """The generated tokens as spans coloured by the model's probability of each; hovering shows the
    probability, the rank and the top alternatives; ``data-step`` lets a click select the step.
    Every piece of model text is escaped."""
    tokens = trace.get("tokens") or []
    steps = trace.get("steps") or []
    aligned = len(steps) == len(tokens)
    parts = []
    if show_prompt and trace.get("prompt"):
        parts.append(f'<span class="pg-prompt">{escape(trace["prompt"])}</span>')
    last = len(tokens) - 1
    repeats = dry_span(trace, selected)
    for i, tok in enumerate(tokens):
        p_raw = math.exp(tok["raw_logprob"]) if tok.get("raw_logprob") is not None else 0.0
        p = math.exp(tok["logprob"]) if tok.get("logprob") is not None else 0.0
        tip = _token_tip(trace, i, tok, p, p_raw, steps[i] if aligned else None, alternatives)
        special = i == last and trace.get("finish_reason") == "eos"
        forced = aligned and bool(steps[i].get("forced"))
        if forced:
            tip += ("\nforced (a branch): the strategy would have taken "
                    f"{token_text(steps[i].get('strategy_choice_text', '?'))}")
        by_grammar = aligned and grammar_forced(steps[i])
        if by_grammar:
            tip += "\nforced by the grammar: the only token it allowed here"
        classes = ("pg-tok" + (" pg-special" if special else "") + (" pg-sel" if i == selected else "")
                   + (" pg-forced" if forced else "") + (" pg-grammar-forced" if by_grammar else ""))
        text = escape(tok["text"]).replace("\n", "↵<br>")
        style = f"background:{prob_color(p_raw)}"
        if by_grammar and not forced:
            style += f";border-bottom:3px dotted {GRAMMAR_FORCED}"
        if i in repeats:
            style += f";text-decoration:underline {repeats[i]} {PENALISED} 2px"
            tip += "\nDRY: " + ("the earlier copy of the repeat" if repeats[i] == "dotted" else "the repeat")
        parts.append(f'<span class="{classes}" data-step="{i}" style="{style}" '
                     f'data-tip="{escape(tip)}">{text}</span>')
    body = "".join(parts) or '<span class="pg-empty">The generated text appears here, token by token.</span>'
    return f'<div class="pg-text">{body}</div>'


def dry_span(trace: dict[str, Any], selected: int | None) -> dict[int, str]:
    """Generated-token index -> underline style of DRY's recorded longest repeat at step ``selected``:
    "dotted" on its earlier copy, "solid" on the repeat that ends the text (context positions less
    the prompt's length; prompt tokens are not drawn one by one)."""
    steps = trace.get("steps") or []
    if selected is None or not 0 <= selected < len(steps):
        return {}
    d = next((st.get("decision") or {} for st in steps[selected].get("stages") or [] if st["name"] == "dry"), {})
    if not d.get("match_length"):
        return {}
    offset = len(trace.get("prompt_ids") or [])
    context_end = offset + selected
    marks = {p - offset: "dotted" for p in range(d["span_start"], d["span_end"]) if p >= offset}
    marks.update({p - offset: "solid" for p in range(d["repeat_start"], context_end) if p >= offset})
    return marks


def _token_tip(trace: dict[str, Any], i: int, tok: dict[str, Any], p: float, p_raw: float,
               step: dict[str, Any] | None, alternatives: int) -> str:
    lines = [f"step {i} · {token_text(tok['text'])}", f"model p {_fmt(p_raw)} (the model's own distribution)",
             f"drawn with p {_fmt(p)} (the distribution it was drawn from)"
             + (f" · log p {tok['logprob']:.3f}" if tok.get("logprob") is not None else "")]
    if step is not None:
        cands = sorted(step["candidates"], key=lambda c: -_prob(c["raw_prob"]))
        rank = next((r + 1 for r, c in enumerate(cands) if c["id"] == tok["id"]), None)
        if rank is not None:
            lines[1] += f" · rank {rank}"
        banned = disallowed_ids(step)
        alts = [f"{token_text(c['text'])} {_fmt(_prob(c['raw_prob']))}"
                + ("" if c["kept"] else " (not allowed)" if c["id"] in banned else " (cut)")
                for c in cands if c["id"] != tok["id"]][:alternatives]
        if alts:
            lines.append("alternatives: " + ", ".join(alts))
    return "\n".join(lines)


def legend_html() -> str:
    """The colour key of the text."""
    stops = ", ".join(prob_color(p / 10, 0.9) for p in range(11))
    return ('<div class="pg-legend"><span>model p of each token:</span><span>0</span>'
            f'<span class="pg-ramp" style="background:linear-gradient(90deg, {stops})"></span><span>1</span>'
            '<span class="pg-hint">hover a token for its rank and alternatives · click it to inspect that step'
            ' · dashed underline: forced by a branch · dotted: forced by the grammar</span></div>')


# --- figures as one export ----------------------------------------------------------------------

BASIS_BUTTONS = {"model": "model's own", "chain": "entering the cuts", "final": "after the samplers"}


def switchable_distribution(trace: dict[str, Any], step: int, top: int = 20) -> go.Figure:
    """The distribution figure with buttons that switch its bars between the model's own
    distribution, the one entering the first truncation, and the one after every stage: one
    ``distribution_figure`` per basis, shown one at a time (each keeps its own marks and axes).
    A step without stages has a single basis and no buttons."""
    if not _stages(trace["steps"][step]):
        return distribution_figure(trace, step, top)
    figs = {b: distribution_figure(trace, step, top, b) for b in BASIS_BUTTONS}
    base = go.Figure(figs["chain"])
    owner = ["chain"] * len(base.data)
    for b in ("model", "final"):
        for t in figs[b].data:
            base.add_trace(t.update(visible=False))
            owner.append(b)
    buttons = []
    for b, text in BASIS_BUTTONS.items():
        lay = figs[b].layout
        buttons.append(dict(label=text, method="update", args=[
            {"visible": [o == b for o in owner]},
            {"shapes": lay.shapes, "annotations": lay.annotations, "title.text": lay.title.text,
             "xaxis.tickvals": lay.xaxis.tickvals, "xaxis.ticktext": lay.xaxis.ticktext,
             "xaxis.range": lay.xaxis.range, "yaxis.range": lay.yaxis.range,
             "yaxis.title.text": lay.yaxis.title.text}]))
    base.update_layout(updatemenus=[*base.layout.updatemenus,  # the scale and zoom buttons stay
                                    dict(type="buttons", direction="right", active=1, buttons=buttons,
                                         x=0.0, xanchor="left", y=-0.32, yanchor="top", showactive=True,
                                         pad=dict(t=4, r=4), font=dict(size=12))],
                       margin=dict(b=110))
    return base


def step_figures(trace: dict[str, Any], step: int, compact: bool = False) -> tuple[go.Figure, go.Figure, go.Figure]:
    """(distribution, waterfall, overview) for ``step``; the three charts of the page.
    ``compact``: for half-width columns (compare): smaller type, titles wrapped, legends under the plot."""
    figs = switchable_distribution(trace, step), waterfall_figure(trace, step), overview_figure(trace, step)
    if compact:
        for fig in figs:
            lines = wrap(fig.layout.title.text or "", 46)  # 15 px type in a half-width column
            fig.update_layout(title_text="<br>".join(lines), title_font_size=15, font_size=12,
                              legend=dict(orientation="h", y=-0.28, yanchor="top", x=0, xanchor="left",
                                          font_size=11),
                              margin=dict(t=(80 if fig is figs[1] else 44) + 20 * len(lines), b=40))
        figs[1].update_xaxes(nticks=3)
        legend_below_buttons(figs[0])
        for fig in figs:  # a half-width column: the caption wraps shorter, the legend under the plot takes rows
            fig.update_layout(meta={"compact": True})
    return figs


def legend_below_buttons(fig: go.Figure) -> None:
    """A legend under the plot goes below the buttons that sit under the axis (the distribution's
    basis buttons), with the room it needs; calling it again changes nothing."""
    below = [m.y for m in fig.layout.updatemenus or () if m.y is not None and m.y < 0]
    if not below:
        return
    if (fig.layout.margin.b or 0) < 190:
        fig.update_layout(margin_b=190, height=(fig.layout.height or 460) + 80)
    fig.update_layout(legend_y=min(below) - 0.16)


def empty_figure(message: str = "Generate to see the charts") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font=dict(size=16, color=RAW), x=0.5, y=0.5,
                       xref="paper", yref="paper")
    fig.update_layout(template=TEMPLATE, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      margin=dict(l=10, r=10, t=10, b=10), height=260)
    return fig


def clamp_step(trace: dict[str, Any] | None, step: Any) -> int | None:
    """``step`` as a valid index into the trace's steps, or None when there are none."""
    n = len((trace or {}).get("steps") or [])
    if n == 0:
        return None
    try:
        k = int(float(step))
    except (TypeError, ValueError):
        k = 0
    return min(max(k, 0), n - 1)

