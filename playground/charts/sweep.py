"""Charts of a sweep and of the answer rules. Pure: no torch, no gradio.

They read the JSON-ready records of ``playground.whatif.sweep`` (one point per value, each with the measures
of ``sweep_metrics``) and ``playground.whatif.answers`` (each rule's pick, its votes and, with a checker,
its accuracy against the number of samples with Wilson intervals). Nothing is recomputed here.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.charts.common import add_caption, escape
from playground.charts.palette import ENTROPY, GUIDE, LOOP, TEMPLATE, WATCHED

# (key in a point, legend name, colour): the shares in [0, 1] of the top panel
SHARES = (("loop_rate", "loop rate", LOOP), ("distinct_1", "distinct-1", WATCHED[0]),
          ("distinct_2", "distinct-2", WATCHED[4]), ("distinct_3", "distinct-3", WATCHED[6]),
          ("modal_share", "agree with the modal answer", WATCHED[1]), ("accuracy", "accuracy", WATCHED[2]))
NATS = (("surprisal", "mean surprisal", WATCHED[5]), ("entropy", "mean entropy", ENTROPY))
LEGEND_Y = -0.16  # under the plot and its x axis's title (place_caption gives it its rows)
RULE_NAMES = {"majority": "majority vote", "mean_logprob": "highest mean logprob", "deepconf": "DeepConf",
              "cot_decoding": "CoT-decoding", "verifier": "verifier"}
RULE_HOW = {"majority": "the most frequent answer; votes: samples per answer (self-consistency)",
            "mean_logprob": "the sample of highest mean log-probability; votes: each answer's best mean",
            "deepconf": "the largest vote of the top η% samples by lowest group confidence, each weighted by it; "
                        "votes: those sums",
            "cot_decoding": "the branch whose answer tokens have the largest top-1 minus top-2 margin; votes: each "
                            "answer's summed margin over its own branches",
            "verifier": "the first sample that passes the check; votes: passing samples per answer"}


def sweep_title(record: dict[str, Any]) -> str:
    done, total = len(record["points"]), len(record["values"])
    state = (f" · stopped after {done} of {total} values" if record.get("stopped") else
             "" if record.get("done", True) else f" · running: {done} of {total} values")
    return (f"{escape(record['param'])} sweep: {escape(record['strategy'])} on {escape(record['model'])}, "
            f"{record['n']} samples of {record['tokens']} tokens per value{state}")


def sweep_figure(record: dict[str, Any], log_x: bool = False) -> go.Figure:
    """The measures against the swept value: shares (loop rate, distinct-n, the modal answer's share,
    accuracy where the sweep had a checker) on top, the chosen tokens' mean surprisal and entropy (nats)
    in the middle, the mean length under them. The x axis spans every value from the start, so a
    running sweep fills it in; ``log_x`` for a log grid."""
    points, values = record["points"], record["values"]
    xs = [p["value"] for p in points]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, row_heights=[0.5, 0.3, 0.2],
                        subplot_titles=("share of the samples", "nats per token", "tokens per sample"))
    answers = [escape(str(p.get("modal_answer"))[:40]) for p in points]
    for key, name, colour in SHARES:
        if key == "accuracy" and not record.get("expected"):
            continue
        fig.add_scatter(x=xs, y=[p.get(key) for p in points], name=name, mode="lines+markers",
                        line=dict(color=colour, width=2), marker=dict(size=7), customdata=answers, row=1, col=1,
                        hovertemplate=f"{escape(record['param'])} = %{{x:.4g}}<br>{name} %{{y:.3f}}"
                                      "<br>modal answer: %{customdata}<extra></extra>")
    for key, name, colour in NATS:
        fig.add_scatter(x=xs, y=[p.get(key) for p in points], name=name, mode="lines+markers",
                        line=dict(color=colour, width=2, dash="dot" if key == "entropy" else "solid"),
                        marker=dict(size=7), row=2, col=1,
                        hovertemplate=f"{escape(record['param'])} = %{{x:.4g}}<br>{name} %{{y:.3f}} nats<extra></extra>")
    fig.add_scatter(x=xs, y=[p.get("length") for p in points], name="mean length", mode="lines+markers",
                    line=dict(color=GUIDE, width=2), marker=dict(size=7), row=3, col=1, showlegend=False,
                    hovertemplate=f"{escape(record['param'])} = %{{x:.4g}}<br>mean length %{{y:.1f}} tokens<extra></extra>")
    _x_axes(fig, values, log_x, record["param"])
    fig.update_yaxes(range=[-0.03, 1.03], row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=3, col=1)
    fig.update_layout(template=TEMPLATE, title=dict(text=sweep_title(record), font=dict(size=14)), height=620,
                      margin=dict(t=60, b=70, l=60, r=20),
                      legend=dict(orientation="h", y=LEGEND_Y, x=0, xanchor="left", yanchor="top", font=dict(size=11)))
    loops = f"a loop: a span written {record['loop_repeats']} times back to back"
    add_caption(fig, f"the same seeds {record['seed']}..{record['seed'] + record['n'] - 1} at every value · {loops}"
                     " · distinct-n: distinct n-grams over all n-grams of the samples")
    return fig


def _x_axes(fig: go.Figure, values: list[float], log_x: bool, param: str) -> None:
    low, high = min(values), max(values)
    if log_x and low > 0:
        pad = (math.log10(high) - math.log10(low)) * 0.05 or 0.1
        span = [math.log10(low) - pad, math.log10(high) + pad]
        fig.update_xaxes(type="log", range=span)
    else:
        pad = (high - low) * 0.05 or max(abs(low) * 0.1, 0.5)
        fig.update_xaxes(range=[low - pad, high + pad])
    fig.update_xaxes(tickvals=values, ticktext=[f"{v:.3g}" for v in values], row=3, col=1, title_text=escape(param))


def answers_figure(result: dict[str, Any]) -> go.Figure | None:
    """Each rule's accuracy against the number of samples it is given, with its 95% interval (error bars;
    the rules side by side at each N); None without a checker (no known answer, no accuracy)."""
    accuracy = result.get("accuracy")
    if not accuracy:
        return None
    fig = go.Figure()
    rules = list(accuracy)
    for i, rule in enumerate(rules):
        curve, colour, name = accuracy[rule], WATCHED[i % len(WATCHED)], RULE_NAMES.get(rule, rule)
        dodge = 1.06 ** (i - (len(rules) - 1) / 2)  # side by side on the log axis; the hover says the true N
        fig.add_scatter(x=[pt["n"] * dodge for pt in curve], y=[pt["accuracy"] for pt in curve], name=name,
                        mode="lines+markers", line=dict(color=colour, width=2), marker=dict(size=7),
                        error_y=dict(type="data", symmetric=False, color=colour, thickness=1.2, width=3,
                                     array=[spread(pt, pt["high"] - pt["accuracy"]) for pt in curve],
                                     arrayminus=[spread(pt, pt["accuracy"] - pt["low"]) for pt in curve]),
                        customdata=[[pt["n"], pt["low"], pt["high"], pt["subsets"]] for pt in curve],
                        hovertemplate=f"{name}<br>N = %{{customdata[0]}}: accuracy %{{y:.3f}}<br>95% interval "
                                      "[%{customdata[1]:.3f}, %{customdata[2]:.3f}] over %{customdata[3]} "
                                      "subsets<extra></extra>")
    sizes = sorted({pt["n"] for curve in accuracy.values() for pt in curve})
    known = " | ".join(escape(e) for e in result.get("expected", []))
    fig.update_layout(template=TEMPLATE, height=400, margin=dict(t=50, b=70, l=60, r=20),
                      title=dict(text=f"accuracy against N (known answer: {known})", font=dict(size=14)),
                      xaxis=dict(title="samples given to the rule (N)", type="log", tickvals=sizes,
                                 ticktext=[str(m) for m in sizes]),
                      yaxis=dict(title="accuracy", range=[-0.03, 1.05]),
                      legend=dict(orientation="h", y=LEGEND_Y - 0.06, x=0, xanchor="left", yanchor="top",
                                  font=dict(size=11)))
    add_caption(fig, "each N: the rule on resampled subsets of N of the samples (CoT-decoding: its first N "
                     "branches, once); bars: Wilson's 95% interval over the subsets (none where one subset is all)")
    return fig


def spread(point: dict[str, Any], half: float) -> float:
    """An error bar's half: none for a point read from one subset (the whole pool, or CoT-decoding's first N),
    where an interval over the subsets says nothing about the resampling (the hover keeps Wilson's)."""
    return 0.0 if point["subsets"] <= 1 else half


def _votes(votes: dict[str, float], top: int = 4) -> str:
    ranked = sorted(votes.items(), key=lambda kv: -kv[1])
    shown = " · ".join(f"<span style='white-space:nowrap'><code>{escape(a[:24])}</code>: {v:.3g}</span>"
                       for a, v in ranked[:top])
    return shown + (f", {len(ranked) - top} more" if len(ranked) > top else "") if ranked else "no answer"


def right(result: dict[str, Any], rule: str) -> bool | None:
    """Whether ``rule``'s pick on the whole pool is the known answer: its accuracy curve's last point (the
    pool itself, once), as the checker scored it; None without a checker."""
    curve = (result.get("accuracy") or {}).get(rule)
    return None if not curve else curve[-1]["accuracy"] == 1.0


def answers_html(result: dict[str, Any], source: str = "") -> str:
    """Each rule's pick with the votes behind it, a mark where the checker accepts the pick, where the rules
    disagree, and the samples' answers counted. ``source``: where the samples came from, in words."""
    rows = []
    for p in result["picks"]:
        pick = "none" if p["answer"] is None else f"<code>{escape(p['answer'][:40])}</code>"
        ok = right(result, p["rule"])
        mark = "" if ok is None else (" ✓" if ok else " ✗")
        rows.append(f"<tr><td><b>{RULE_NAMES.get(p['rule'], escape(p['rule']))}</b></td><td style='white-space:nowrap'>{pick}{mark}</td>"
                    f"<td>{_votes(p['votes'])}</td><td class='pg-note'>{RULE_HOW.get(p['rule'], '')}</td></tr>")
    d = result["disagreements"]
    verdict = ("<b>The rules agree.</b>" if d["agree"] else "<b>The rules disagree:</b> " + "; ".join(
        f"<code>{escape(str(a))}</code> by {', '.join(RULE_NAMES.get(r, escape(r)) for r in rules)}"
        for a, rules in d["answers"].items()))
    counts: dict[str, int] = {}
    for s in result["samples"]:
        key = "none" if s["answer"] is None else str(s["answer"])
        counts[key] = counts.get(key, 0) + 1
    spread = ", ".join(f"<code>{escape(a[:24])}</code> × {c}" for a, c in sorted(counts.items(), key=lambda kv: -kv[1])[:8])
    return (f"<p>{verdict}</p><p>{result['n']} samples of {escape(result['strategy'])} on {escape(result['model'])}"
            f"{' (' + escape(source) + ')' if source else ''}, answers by <code>{escape(result['extract'])}</code>: {spread}"
            f"{' · ' + str(len(result['branches'])) + ' CoT branches' if result['branches'] else ''}</p>"
            "<div class='pg-view'><table class='pg-table' style='min-width:600px'><tr><th>rule</th><th>pick</th><th>votes</th>"
            f"<th>how it picks</th></tr>{''.join(rows)}</table></div>{samples_html(result)}")


def samples_html(result: dict[str, Any], top: int = 60) -> str:
    """The samples the rules read (and CoT-decoding's branches), each with its seed, its answer and its text,
    folded under a summary line; the first ``top`` of each."""
    def row(kind: str, s: dict[str, Any]) -> str:
        answer = "none" if s["answer"] is None else f"<code>{escape(str(s['answer'])[:24])}</code>"
        return f"<tr><td>{kind} {s['seed']}</td><td>{answer}</td><td><code>{escape(s['text'][:160])}</code></td></tr>"

    shown = [row("seed", s) for s in result["samples"][:top]] + [row("branch", b) for b in result["branches"][:top]]
    cut = len(result["samples"]) > top
    return (f"<details class='pg-samples'><summary>the {result['n']} samples and their answers"
            f"{' (the first ' + str(top) + ')' if cut else ''}{', and the CoT branches' if result['branches'] else ''}"
            "</summary><div class='pg-view'><table class='pg-table'><tr><th>sample</th><th>answer</th><th>text</th>"
            f"</tr>{''.join(shown)}</table></div></details>")


def point_html(record: dict[str, Any], index: int, top: int = 60) -> str:
    """One sweep point opened: its value, its measures in a line, and its kept samples with the answer
    the sweep read from each (the first ``top``)."""
    p = record["points"][index]
    answers = p.get("answers") or [None] * len(p.get("samples", []))
    rows = "".join(f"<tr><td>seed {s['seed']}</td><td><code>{escape(str(a)[:24])}</code></td>"
                   f"<td><code>{escape(s['text'][:160])}</code></td></tr>"
                   for s, a in list(zip(p.get("samples", []), answers))[:top])
    measures = " · ".join(f"{name} {p[key]:.3g}" for key, name, _ in (*SHARES, *NATS)
                          if isinstance(p.get(key), (int, float)))
    more = f" (the first {top})" if len(p.get("samples", [])) > top else ""
    return (f"<p><b>{escape(record['param'])} = {p['value']:.4g}</b>: {p['n']} samples, modal answer "
            f"<code>{escape(str(p['modal_answer'])[:40])}</code> · {measures}. Pick the answers to run the rules on "
            f"these samples{more}.</p><div class='pg-view'><table class='pg-table'><tr><th>sample</th><th>answer</th>"
            f"<th>text</th></tr>{rows}</table></div>")
