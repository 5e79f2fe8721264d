"""Beam-family views: the search tree, the finished hypotheses, the work counters.

Reads only the trace's ``beam`` section (strategies/beam_tree.py describes it).
Pure: no torch, no gradio. Token text is model output, so it is escaped
before it goes into hover labels or HTML.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import TOKEN_MARKS, View, add_caption, counted, escape, show_token, token_text
from playground.charts.palette import (
    BEAM_EDGE,
    BEAM_KEPT,
    BEST,
    BEST_ROW,
    BUDGET_CUT,
    CLEAR,
    FELL_OFF,
    FELL_OFF_EDGE,
    FINISHED,
    FINISHED_OUTLINE,
    PROMPT,
    PRUNED,
    PRUNED_EDGE,
    SAMPLED_EDGE,
    SAMPLED_PREFIX,
    SELECTED,
)

DENSE = 400  # above this many nodes, candidates that fell off start hidden (one legend click shows them)
MAX_LABELS = 60  # token labels on the winning path beyond this would overlap

# status -> (legend name, marker, edge colour, edge dash, opacity)
STYLE: dict[str, dict[str, Any]] = {
    "kept": dict(name="kept", marker=dict(color=BEAM_KEPT, size=9, symbol="circle"), edge=BEAM_EDGE,
                 dash="solid", opacity=1.0),
    "finished": dict(name="finished", marker=dict(color=FINISHED, size=13, symbol="star",
                                                  line=dict(color=FINISHED_OUTLINE, width=1)),
                     edge=BEAM_EDGE, dash="solid", opacity=1.0),
    "sampled": dict(name="sampled prefix", marker=dict(color=SAMPLED_PREFIX, size=10, symbol="diamond"),
                    edge=SAMPLED_EDGE, dash="solid", opacity=1.0),
    "pruned": dict(name="pruned", marker=dict(color=PRUNED, size=8, symbol="x"), edge=PRUNED_EDGE,
                   dash="dot", opacity=0.5),
    "fell_off": dict(name="fell off the beam", marker=dict(color=FELL_OFF, size=6, symbol="circle-open"),
                     edge=FELL_OFF_EDGE, dash="dot", opacity=0.35),
}
RULE_TEXT = {
    "relative_threshold": "relative threshold: P(c) <= r_p x P(best), log bound",
    "absolute_threshold": "absolute threshold: score <= best - a_p, bound",
    "relative_local_threshold": "local threshold: p(token) <= r_pl x best token p, log bound",
    "max_candidates_per_node": "max candidates per node: its parent already had",
}


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """The family's views; ``step`` (an index into ``trace["steps"]``) is marked on the tree."""
    beam = trace.get("beam")
    if not beam:
        return []
    return [View("Beam tree", tree_figure(trace, step)),
            View("Finished hypotheses", html=finished_table(trace)),
            View("Beam search work", html=counters_html(beam)),
            View("Beam width per step", width_figure(beam))]


# --- the tree -----------------------------------------------------------------------------------


def layout_rows(nodes: list[dict[str, Any]]) -> dict[int, float]:
    """y of every node: its rank within the step, trees stacked one under another."""
    rows_per_tree: dict[int, int] = defaultdict(int)
    for n in nodes:
        rows_per_tree[n["tree"]] = max(rows_per_tree[n["tree"]], n["rank"] + 1)
    offset, start = {}, 0
    for tree in sorted(rows_per_tree):
        offset[tree] = start
        start += rows_per_tree[tree] + 2  # two empty rows between trees: room for the next tree's label
    return {n["id"]: offset[n["tree"]] + n["rank"] for n in nodes}


def hover(node: dict[str, Any], score_label: str, logprob_label: str = "log-prob") -> str:
    """The hover label of one node; the token text escaped."""
    lines = [f"step {node['step']}, rank {node['rank']}",
             f"token {show_token(node['text'])} (id {node['token_id']})",
             f"{logprob_label} {_num(node['logprob'])}, {score_label} {_num(node['score'])}"]
    if node.get("model_score") is not None and node["model_score"] != node["score"]:
        lines.append(f"model log-prob {_num(node['model_logprob'])}, sum {_num(node['model_score'])}")
    if node.get("penalised") is not None:
        lines.append(f"length-penalised {_num(node['penalised'])}")
    if node.get("perturbed") is not None:
        lines.append(f"perturbed score G {_num(node['perturbed'])}")
    if node.get("forced") == "budget":
        lines.append("<b>forced by the thinking budget</b> (its log-prob is the model's own)")
    status = node["status"]
    if status == "pruned":
        rule = node["reason"]
        lines.append(f"<b>pruned</b>: {RULE_TEXT.get(rule, escape(rule, quote=False))} {_num(node['threshold'])}")
    elif node["reason"]:
        lines.append(f"<b>{status.replace('_', ' ')}</b>: {escape(node['reason'], quote=False)}")
    else:
        lines.append(f"<b>{status.replace('_', ' ')}</b>")
    return "<br>".join(lines)


def tree_figure(trace: dict[str, Any], step: int | None = None) -> go.Figure:
    """x = step, y = rank within the step; edges from each node's parent; the winner in red; the
    selected step (an index into ``trace["steps"]``, the same as the tree's x) in a band."""
    beam = trace["beam"]
    nodes: list[dict[str, Any]] = beam["nodes"]
    by_id = {n["id"]: n for n in nodes}
    y = layout_rows(nodes)
    dense = len(nodes) > DENSE
    label, lp_label = beam.get("score_label", "score"), beam.get("logprob_label", "log-prob")
    fig = go.Figure()
    roots = sorted({n["tree"] for n in nodes if n["parent"] is None})
    root_y = {t: min((y[n["id"]] for n in nodes if n["tree"] == t), default=0) for t in roots}
    for status, style in STYLE.items():
        group = [n for n in nodes if n["status"] == status]
        if not group:
            continue
        visible: bool | str = "legendonly" if dense and status == "fell_off" else True
        ex, ey = _edges(group, by_id, y, root_y)
        # a dense tree keeps its shape readable with hairline edges and small nodes
        marker = dict(style["marker"], size=max(4, style["marker"]["size"] - 4)) if dense else style["marker"]
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                                 line=dict(color=style["edge"], width=0.5 if dense else 1, dash=style["dash"]),
                                 opacity=0.55 if dense else 1.0,
                                 legendgroup=status, visible=visible, meta={"role": "edges", "status": status}))
        fig.add_trace(go.Scatter(
            x=[n["step"] for n in group], y=[y[n["id"]] for n in group], mode="markers", name=style["name"],
            marker=marker, opacity=style["opacity"], legendgroup=status, visible=visible,
            customdata=[n["id"] for n in group], hovertext=[hover(n, label, lp_label) for n in group],
            hoverinfo="text", meta={"role": "nodes", "status": status}))
    _add_best(fig, beam, by_id, y, root_y)
    forced = [n for n in nodes if n.get("forced") == "budget"]
    if forced:  # the thinking budget's forced tokens (strategies/phases.py), ringed on top of their status
        fig.add_trace(go.Scatter(x=[n["step"] for n in forced], y=[y[n["id"]] for n in forced], mode="markers",
                                 marker=dict(color=BUDGET_CUT, size=17, symbol="diamond-open", line=dict(width=2)),
                                 name="forced by the thinking budget", customdata=[n["id"] for n in forced],
                                 hovertext=[hover(n, label, lp_label) for n in forced], hoverinfo="text",
                                 meta={"role": "forced"}))
    fig.add_trace(go.Scatter(x=[-1] * len(roots), y=[root_y[t] for t in roots], mode="markers",
                             marker=dict(color=PROMPT, size=10, symbol="square"), name="prompt",
                             hovertext=["prompt"] * len(roots), hoverinfo="text", meta={"role": "prompt"}))
    _layout(fig, trace, nodes, y, dense)
    _mark_step(fig, trace, step)
    finished = sum(1 for n in nodes if n["status"] == "finished")
    add_caption(fig, f"x: step, y: rank within the step; red: the winning path; stars: the {finished} finished "
                     f"hypotheses; x marks: pruned; open circles: candidates that fell off the beam · {TOKEN_MARKS}")
    return fig


def candidate_count(beam: dict[str, Any]) -> int:
    """The candidates the search considered: the recorded counter, else the tree's nodes less the sampled
    prefix tokens (they are drawn, not candidates)."""
    counted = (beam.get("counters") or {}).get("candidates")
    if counted is not None:
        return int(counted)
    return sum(1 for n in beam["nodes"] if n["status"] != "sampled")


def _hypothesis(row: dict[str, Any]) -> str:
    """A finished hypothesis's text as the table shows it; one that ended at once (its only token the end
    of text, which decodes to nothing) says so instead of leaving the cell empty."""
    text = row.get("text", "")
    if text:
        return escape(token_text(text))
    return "<em>(nothing: ended at once)</em>" if row.get("eos") else "<em>(empty)</em>"


def _mark_step(fig: go.Figure, trace: dict[str, Any], step: int | None) -> None:
    """A band over the selected step's column, labelled with the token chosen there."""
    steps = trace.get("steps") or []
    if step is None or not 0 <= step < len(steps):
        return
    tokens = trace.get("tokens") or []
    text = f"step {step}" + (f": {show_token(tokens[step]['text'])}" if step < len(tokens) else "")
    fig.add_vrect(x0=step - 0.5, x1=step + 0.5, fillcolor=SELECTED, opacity=0.18, line_width=0, layer="below",
                  name="selected_step", annotation=dict(text=text, font=dict(color=SELECTED, size=11)),
                  annotation_position="bottom left")


def _edges(group: list[dict[str, Any]], by_id: dict[int, dict[str, Any]], y: dict[int, float],
           root_y: dict[int, float]) -> tuple[list[Any], list[Any]]:
    """Parent -> child segments separated by None (one trace for a whole status)."""
    xs: list[Any] = []
    ys: list[Any] = []
    for n in group:
        parent = by_id.get(n["parent"]) if n["parent"] is not None else None
        px, py = (parent["step"], y[parent["id"]]) if parent else (-1, root_y.get(n["tree"], 0))
        xs += [px, n["step"], None]
        ys += [py, y[n["id"]], None]
    return xs, ys


def label_sides(ys: list[float]) -> list[str]:
    """Where each point's label of a path through ``ys`` (ranks, drawn top down) goes: above a node whose
    two edges both leave downwards, below one whose edges both leave upwards (the side they leave free);
    elsewhere alternating with the label before, so two labels a step apart never meet."""
    out: list[str] = []
    for i, y in enumerate(ys):
        near = [ys[j] for j in (i - 1, i + 1) if 0 <= j < len(ys)]
        if len(near) == 2 and all(v > y for v in near):
            out.append("top center")
        elif len(near) == 2 and all(v < y for v in near):
            out.append("bottom center")
        else:
            out.append("bottom center" if out and out[-1] == "top center" else "top center")
    return out


def _add_best(fig: go.Figure, beam: dict[str, Any], by_id: dict[int, dict[str, Any]], y: dict[int, float],
              root_y: dict[int, float]) -> None:
    best = beam.get("best") or []
    if isinstance(best, int):
        best = [best]
    path = [by_id[i] for i in best]
    if not path:
        return
    xs = [-1] + [n["step"] for n in path]
    ys = [root_y.get(path[0]["tree"], 0)] + [y[n["id"]] for n in path]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=BEST, width=3), hoverinfo="skip",
                             showlegend=False, meta={"role": "best_edges"}))
    labels = [show_token(n["text"]) for n in path] if len(path) <= MAX_LABELS else None
    positions = label_sides(ys)[1:]
    fig.add_trace(go.Scatter(
        x=[n["step"] for n in path], y=[y[n["id"]] for n in path], mode="markers+text" if labels else "markers",
        text=labels, textposition=positions, textfont=dict(color=BEST, size=11), name="winning path",
        marker=dict(color=CLEAR, size=15, line=dict(color=BEST, width=2.5)),
        customdata=[n["id"] for n in path],
        hovertext=[f"winning path, step {n['step']}: {show_token(n['text'])}" for n in path],
        hoverinfo="text", meta={"role": "best"}))


def _layout(fig: go.Figure, trace: dict[str, Any], nodes: list[dict[str, Any]], y: dict[int, float],
            dense: bool) -> None:
    beam = trace["beam"]
    rows = (max(y.values()) + 1) if y else 1
    sampled = sum(1 for n in nodes if n["status"] == "sampled")
    title = f"{beam.get('kind', 'beam')} tree: {candidate_count(beam):,} candidates"
    if sampled:
        title += f" after {sampled} sampled prefix tokens"
    if beam.get("num_beams"):
        title += f", {beam['num_beams']} beams"
    if beam.get("finishing") == "keep_slot":
        title += ", finished hypotheses keep their slot"
    if beam.get("prefixes_drawn") is not None and beam["prefixes_drawn"] < beam.get("prefixes_asked", 0):
        title += (f", {beam['prefixes_drawn']} of {beam['prefixes_asked']} prefixes drawn (no more distinct "
                  "prefixes have mass)")
    if dense:
        title += " (candidates that fell off are hidden: click the legend to show them)"
    height = int(min(1400, max(380, 120 + 16 * rows)))
    plot = height - 60 - 110  # the plot area's height: the legend goes a fixed 48 px under it, below the axis title
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="rank within the step",
                      height=height, hovermode="closest",
                      legend=dict(orientation="h", y=-48 / plot, yanchor="top", x=0, xanchor="left"),
                      margin=dict(l=60, r=20, t=60, b=110))
    fig.update_yaxes(autorange="reversed", zeroline=False)
    fig.update_xaxes(zeroline=False, dtick=1 if _max_step(nodes) <= 20 else 5)
    for t in beam.get("trees") or []:
        ys = [y[n["id"]] for n in nodes if n["tree"] == t["tree"]]
        if ys:
            prefix = show_token(t.get("prefix_text", ""))
            fig.add_annotation(x=-1, y=min(ys), text=f"tree {t['tree']}: {prefix}", showarrow=False, xanchor="left",
                               yshift=26, font=dict(size=10, color=SAMPLED_PREFIX))


def _max_step(nodes: list[dict[str, Any]]) -> int:
    return max((n["step"] for n in nodes), default=0)


# --- tables and counters --------------------------------------------------------------------------


def finished_table(trace: dict[str, Any]) -> str:
    """The results, best first, with the score each family ranks them by.

    beam / sample_beam: the summed log-probability and, with transformers' finishing rule, the
    length-penalised score; stochastic beams: the model's summed log-probability, the tempered
    sum phi the search used (at T != 1) and the perturbed score G.
    """
    beam = trace["beam"]
    rows = beam.get("finished") or []
    trees = bool(beam.get("trees"))
    columns = _result_columns(beam, rows)
    head = ["#"] + (["tree"] if trees else []) + ["hypothesis", "tokens"] + [c for c, _ in columns] + ["ends with"]
    out = ['<table class="beam-finished"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) +
           "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        cells = [str(i + 1)] + ([str(r.get("tree", 0))] if trees else [])
        cells += [_hypothesis(r), str(r.get("length", ""))]
        cells += [_num(r.get(key)) for _, key in columns]
        cells.append("EOS" if r.get("eos") else "length limit")
        style = f' style="font-weight:bold;background:{BEST_ROW}"' if i == 0 else ""
        out.append(f"<tr{style}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    if not rows:
        out.append("<p>No finished hypothesis yet.</p>")
    return "".join(out)


def _result_columns(beam: dict[str, Any], rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(header, record key) of the score columns."""
    if any(r.get("perturbed") is not None for r in rows):
        t = beam.get("temperature", 1.0)
        tempered = [(f"tempered log-prob sum phi (T={_num(t)})", "phi")] if t not in (None, 1, 1.0) else []
        return [("model log-prob (sum)", "score")] + tempered + [("perturbed G (ranks)", "perturbed")]
    if beam.get("finishing") == "keep_slot":
        return [("log-prob (sum, ranks)", "score")]
    lp = beam.get("length_penalty")
    return [("log-prob (sum)", "score"), (f"score / length^{_num(lp)} (ranks)" if lp is not None else "penalised",
                                          "penalised")]


def counters_html(beam: dict[str, Any]) -> str:
    """Candidates considered, hypotheses expanded with and without pruning, and what each rule cut."""
    c = beam.get("counters") or {}
    expanded, without = c.get("expanded", 0), c.get("expanded_without_pruning", 0)
    saved = 1 - expanded / without if without else 0.0
    rows = [("candidates considered", c.get("candidates", 0)),
            ("hypotheses expanded (rows fed to the model)", expanded),
            ("expanded without pruning", without),
            ("saved by pruning", f"{saved:.1%}"),
            ("pruned", c.get("pruned", 0))]
    rows += [(f"&nbsp;&nbsp;by {escape(rule)}", n) for rule, n in (c.get("pruned_by_rule") or {}).items()]
    rows += [("fell off the beam", c.get("fell_off", 0)), ("finished", c.get("finished", 0)),
             ("forward passes", c.get("forward_passes", 0))]
    if "cache_reorders" in c:
        rows.append(("KV-cache reorders (skipped when unchanged)",
                     f"{c['cache_reorders']} ({c.get('cache_reorders_skipped', 0)} skipped)"))
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="beam-counters"><tbody>{body}</tbody></table>'


def width_figure(beam: dict[str, Any]) -> go.Figure:
    """How many tree nodes of each step were kept, finished, pruned or fell off (a sample-then-beam
    tree's sampled prefix tokens are nodes too, not candidates)."""
    nodes = beam["nodes"]
    steps = sorted({n["step"] for n in nodes})
    counts = Counter((n["step"], n["status"]) for n in nodes)
    fig = go.Figure()
    for status, style in STYLE.items():
        ys = [counts.get((s, status), 0) for s in steps]
        if any(ys):
            fig.add_trace(go.Bar(x=steps, y=ys, name=style["name"], marker_color=style["marker"]["color"]))
    # the legend a fixed 50 px under the plot, below the axis title
    fig.update_layout(barmode="stack", title="tree nodes per step by fate", xaxis_title="step",
                      yaxis_title="nodes", height=360, legend=dict(orientation="h", y=-50 / (360 - 86 - 110)),
                      margin=dict(b=110))
    add_caption(fig, f"the run's {counted(sum(counts.values()), 'tree node')}, per step by fate: kept in the beam, "
                     f"finished, pruned by a rule, fell off the beam")
    return fig


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x)
    return f"{x:.4g}" if isinstance(x, float) else str(x)
