"""The watermarks of a run, drawn from their stages' records. The green list (strategies/sampling/
watermark.py): the detector's running z-score over the run's tokens, each token green or red, with
the detection threshold; and each step's green mass before and after the bias against the step's
entropy, where a step with one dominant token leaves the bias nothing to move. Nothing is recomputed:
z, the counts, the masses and the flags are the stage's record of each step; the entropy is the step's
``raw_entropy``. SynthID (strategies/sampling/synthid.py): the running mean and weighted-mean scores
and each token's mean g-value, against 0.5. Pure: no torch, no gradio.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from playground.charts.common import TOKEN_MARKS, View, add_caption, escape, show_token
from playground.charts.palette import CHOSEN, GREEN_LISTED, GUIDE, RED_LISTED, TEMPLATE

THRESHOLD = 4.0  # the paper's detection threshold: z > 4 is a one-sided p-value under 3.2e-5


def records(trace: dict[str, Any], name: str = "watermark") -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """(step index, the step, the stage's decision) of every step the stage ``name`` recorded."""
    out = []
    for i, step in enumerate(trace.get("steps") or []):
        for stage in step.get("stages") or ():
            if stage.get("name") == name and stage.get("decision"):
                out.append((i, step, stage["decision"]))
    return out


def _labels(trace: dict[str, Any], steps: list[int]) -> list[str]:
    tokens = trace.get("tokens") or []
    return [show_token(tokens[i]["text"]) if i < len(tokens) else "" for i in steps]


def z_figure(trace: dict[str, Any], recs: list[tuple[int, dict[str, Any], dict[str, Any]]],
             selected: int | None = None) -> go.Figure:
    steps = [i for i, _, _ in recs]
    decisions = [d for _, _, d in recs]
    labels = _labels(trace, steps)
    greens = [bool(d.get("chosen_green")) for d in decisions]
    last = decisions[-1]
    fig = go.Figure(go.Scatter(
        x=steps, y=[d.get("z") for d in decisions], mode="lines+markers", name="z after the token",
        line=dict(color=GUIDE, width=1.5),
        marker=dict(size=9, color=[GREEN_LISTED if g else RED_LISTED for g in greens]),
        customdata=[[label, "green" if g else "red", d.get("green_count"), d.get("scored")]
                    for label, g, d in zip(labels, greens, decisions)],
        hovertemplate="step %{x} <b>%{customdata[0]}</b> (%{customdata[1]})<br>z %{y:.2f}: %{customdata[2]} green "
                      "of %{customdata[3]} scored<extra></extra>"))
    fig.add_hline(y=THRESHOLD, line=dict(color=GUIDE, dash="dash", width=1),
                  annotation_text=f"z = {THRESHOLD:g}: detected", annotation_position="top left")
    if selected is not None and selected in steps:
        k = steps.index(selected)
        fig.add_trace(go.Scatter(x=[selected], y=[decisions[k].get("z")], mode="markers", name=f"step {selected}",
                                 marker=dict(size=18, color="rgba(0,0,0,0)", line=dict(color=CHOSEN, width=3)),
                                 hoverinfo="skip", showlegend=False))
    z = last.get("z")
    verdict = "no z yet" if z is None else (f"z = {z:.2f}, " + ("watermarked" if z > THRESHOLD else "not detected"))
    scheme = f"δ {last.get('delta', 0):g}, γ {last.get('gamma', 0):g}, {last.get('scheme', '')}"
    fig.update_layout(template=TEMPLATE, height=340, margin=dict(t=80, b=60), showlegend=False,
                      title=dict(text=f"Watermark ({scheme}): {verdict} after {len(steps)} tokens"),
                      xaxis=dict(title_text="step"), yaxis=dict(title_text="z-score", zeroline=True))
    expected = last.get("gamma", 0) * (last.get("scored") or 0)
    add_caption(fig, f"the detector's z over the tokens so far, (green − γ·scored) / √(scored·γ(1−γ)); each token "
                     f"green or red as its step's list has it: {last.get('green_count')} green of "
                     f"{last.get('scored')} scored, {expected:.1f} expected without a watermark")
    return fig


def mass_figure(trace: dict[str, Any], recs: list[tuple[int, dict[str, Any], dict[str, Any]]]) -> go.Figure:
    steps = [i for i, _, _ in recs]
    labels = _labels(trace, steps)
    entropy = [s.get("raw_entropy") for _, s, _ in recs]
    before = [d.get("green_mass_before") for _, _, d in recs]
    after = [d.get("green_mass_after") for _, _, d in recs]
    greens = [bool(d.get("chosen_green")) for _, _, d in recs]
    xs: list[float | None] = []
    ys: list[float | None] = []
    for h, b, a in zip(entropy, before, after):
        xs += [h, h, None]
        ys += [b, a, None]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=GUIDE, width=1), hoverinfo="skip",
                             name="before → after"))
    fig.add_trace(go.Scatter(x=entropy, y=before, mode="markers", name="green mass before the bias",
                             marker=dict(size=6, color="rgba(0,0,0,0)", line=dict(color=GUIDE, width=1.5)),
                             hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=entropy, y=after, mode="markers", name="after (the token: green or red)",
        marker=dict(size=9, color=[GREEN_LISTED if g else RED_LISTED for g in greens]),
        customdata=[[i, label, b] for i, label, b in zip(steps, labels, before)],
        hovertemplate="step %{customdata[0]} <b>%{customdata[1]}</b><br>entropy %{x:.2f} nats<br>green mass "
                      "%{customdata[2]:.3f} → %{y:.3f}<extra></extra>"))
    low = sum(1 for h in entropy if h is not None and h < 0.5)
    fig.update_layout(template=TEMPLATE, height=360, margin=dict(t=90, b=60),
                      title=dict(text="Where the watermark could act: green mass against the step's entropy"),
                      xaxis=dict(title_text="the model's entropy at the step (nats)", rangemode="tozero"),
                      yaxis=dict(title_text="green mass", range=[0, 1.02]),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left"))
    add_caption(fig, f"each step's green-list mass before (ring) and after (dot) the bias; at low entropy one token "
                     f"holds the mass and the bias moves little: {low} of {len(steps)} steps under 0.5 nats; "
                     f"{TOKEN_MARKS}")
    return fig


def synthid_figure(trace: dict[str, Any], recs: list[tuple[int, dict[str, Any], dict[str, Any]]],
                   selected: int | None = None) -> go.Figure:
    """SynthID's running scores: the mean g-value of the scored tokens so far and its weighted form (the
    stage's records), each token's own mean g-value as a point, against 0.5, a text without the watermark."""
    steps = [i for i, _, _ in recs]
    decisions = [d for _, _, d in recs]
    labels = _labels(trace, steps)
    fig = go.Figure()
    for key, name, dash in (("mean", "mean score", "solid"), ("weighted_mean", "weighted mean", "dot")):
        fig.add_trace(go.Scatter(x=steps, y=[d.get(key) for d in decisions], mode="lines", name=name,
                                 line=dict(color=GUIDE, dash=dash, width=2), hoverinfo="skip"))
    counted = [bool(d.get("counted")) for d in decisions]
    fig.add_trace(go.Scatter(
        x=steps, y=[d.get("chosen_g_mean") for d in decisions], mode="markers", name="the token's mean g-value",
        marker=dict(size=9, color=[GREEN_LISTED if (d.get("chosen_g_mean") or 0) > 0.5 else RED_LISTED
                                   for d in decisions],
                    symbol=["circle" if c else "circle-open" for c in counted]),
        customdata=[[label, "scored" if c else "not scored"] for label, c in zip(labels, counted)],
        hovertemplate="step %{x} <b>%{customdata[0]}</b><br>mean g-value %{y:.2f}, %{customdata[1]}<extra></extra>"))
    fig.add_hline(y=0.5, line=dict(color=GUIDE, dash="dash", width=1), annotation_text="0.5: no watermark",
                  annotation_position="bottom left")
    if selected is not None and selected in steps:
        k = steps.index(selected)
        fig.add_trace(go.Scatter(x=[selected], y=[decisions[k].get("chosen_g_mean")], mode="markers",
                                 marker=dict(size=18, color="rgba(0,0,0,0)", line=dict(color=CHOSEN, width=3)),
                                 hoverinfo="skip", showlegend=False))
    last = decisions[-1]
    mean, scored = last.get("mean"), last.get("scored")
    score = "no token scored yet" if mean is None else f"mean score {mean:.3f} over {scored} scored tokens"
    fig.update_layout(template=TEMPLATE, height=340, margin=dict(t=90, b=60),
                      title=dict(text=f"SynthID ({last.get('depth')} layers, n-gram {last.get('ngram_len')}): {score}"),
                      xaxis=dict(title_text="step"), yaxis=dict(title_text="g-value", range=[-0.05, 1.05]),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, xanchor="left"))
    add_caption(fig, "tournament sampling favours tokens whose g-values (one random bit per layer, seeded by the "
                     "key and the last n-gram) are 1: the scored tokens' mean climbs above 0.5, the mean a text "
                     "without the watermark keeps; hollow: a token not scored (its n-gram reaches back past the text's "
                     "start, or its context repeats one seen before)")
    return fig


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    out = []
    recs = records(trace)
    if recs:
        out += [View("Watermark z-score", z_figure(trace, recs, step)),
                View("Watermark and entropy", mass_figure(trace, recs))]
    synthid = records(trace, "synthid")
    if synthid:
        out.append(View("SynthID scores", synthid_figure(trace, synthid, step)))
    return out


# Unwatermarked text can pass the threshold where it repeats itself: the same (previous, token) pair counted
# each time it recurs (a 100k-character repeat scored z 22.2 under lefthash; selfhash with a context of one
# token scored unwatermarked SmolLM2 texts up to z 4.08; transformers' WatermarkDetector gives the same
# numbers). Counting each pair once brought them to 0.3-1.0.
REPEATS_CAVEAT = ("Repeated text can score over 4 without a watermark, each repeat counted again; "
                  "counting each pair once (--ignore-repeated-ngrams) guards against it")


def detection_html(result: dict[str, Any]) -> str:
    """A detection of a text (playground/whatif/watermark.py: the green list's or SynthID's) as HTML: the
    verdict with its numbers, then the text, each scored token green or red (SynthID: by its mean g-value
    against 0.5), a token not scored in the page's ink."""
    def token(text: str, colour: str | None, tip: str) -> str:
        style = f' style="color:{colour};font-weight:600"' if colour else ""
        return f'<span title="{escape(tip)}"{style}>{escape(text, quote=False)}</span>'

    if result.get("watermark") == "synthid":
        head = (f"SynthID: mean g-value <b>{result['mean']:.3f}</b>, weighted mean {result['weighted_mean']:.3f} over "
                f"{result['scored']} scored tokens and {result['depth']} layers (about 0.5 without the watermark)")
        parts = []
        for m in result["marks"]:
            if m.get("counted") and m.get("g_values"):
                g = sum(m["g_values"]) / len(m["g_values"])
                parts.append(token(m["text"], GREEN_LISTED if g > 0.5 else RED_LISTED, f"mean g-value {g:.2f}"))
            else:
                parts.append(token(m["text"], None, "not scored"))
    else:
        verdict = "watermarked" if result["z"] > THRESHOLD else "no watermark found"
        head = (f"{verdict}: z = <b>{result['z']:.2f}</b>, p = {result['p_value']:.3g} ({result['green']} green of "
                f"{result['scored']} scored, {result['green_fraction']:.0%}; {result['gamma']:g} expected without a "
                f"watermark; {escape(result['scheme'])}, key {result['key']})")
        if not result.get("ignore_repeated_ngrams"):
            head += f". {REPEATS_CAVEAT}"
        parts = [token(m["text"], None if m["green"] is None else GREEN_LISTED if m["green"] else RED_LISTED,
                       "not scored" if m["green"] is None else "green" if m["green"] else "red")
                 for m in result["marks"]]
    return f'<div class="pg-detect"><p>{head}</p><p style="white-space:pre-wrap">{"".join(parts)}</p></div>'
