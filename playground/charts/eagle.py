"""Views of an EAGLE trace: each round's draft tree and tau over rounds.

Reads only the trace's JSON form: each round's ``tree`` (nodes with token, parent, depth, draft and
target probabilities and the fate the verifier recorded), its ``path`` and ``next`` token, and the
``speculative`` totals; wall-clock figures from ``timing.speculative``. Pure: no torch, no gradio.
The tree runs left to right (depth on x); the accepted path is drawn bold green, rejected drafts
red and faded, drafts below a rejection (never tested) grey and faded, the target's token blue.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from playground.charts import break_even
from playground.charts.common import TOKEN_MARKS, View, add_caption, escape, num, show_token, token_text
from playground.charts.palette import ACCEPTED, ADDED, REJECTED, ROOT, UNUSED
from playground.charts.speculative import BELOW

FATES = {"root": (ROOT, 1.0), "accepted": (ACCEPTED, 1.0), "rejected": (REJECTED, 0.35), "unreached": (UNUSED, 0.3)}


def is_eagle(trace: dict[str, Any]) -> bool:
    return (trace.get("speculative") or {}).get("draft_kind") == "eagle"


def _rows(nodes: list[dict[str, Any]]) -> dict[int, float]:
    """A y for each node: leaves in depth-first order one apart, a parent at the mean of its children."""
    kids: dict[int, list[int]] = {n["node"]: [] for n in nodes}
    for n in nodes[1:]:
        kids[n["parent"]].append(n["node"])
    y: dict[int, float] = {}
    leaf = [0]

    def place(i: int) -> float:
        if not kids[i]:
            y[i] = float(leaf[0])
            leaf[0] += 1
        else:
            y[i] = sum(place(c) for c in kids[i]) / len(kids[i])
        return y[i]

    place(0)
    return y


def _hover(n: dict[str, Any]) -> str:
    if n["fate"] == "root":
        return escape(f"root {token_text(n['text'])}: the last committed token", quote=False)
    test = f", accept prob {n['accept_prob']:.3g}" if n.get("accept_prob") is not None else ""
    u = f", u {n['u']:.3g}" if n.get("u") is not None else ""
    return escape(f"{token_text(n['text'])}: draft {n['q_draft']:.3g}, target {n['p_target']:.3g}, "
                  f"cumulative draft {n['score']:.3g}{test}{u} -> {n['fate']}", quote=False)


def tree_figure(trace: dict[str, Any], round_index: int) -> go.Figure:
    r = trace["rounds"][round_index]
    nodes = r["tree"]
    y = _rows(nodes)
    leaves = int(max(y.values(), default=0)) + 1
    crowded = leaves > 24  # one label per leaf row would overlap: the path keeps its labels, hover keeps the rest
    fig = go.Figure()
    for n in nodes[1:]:
        colour, opacity = FATES[n["fate"]]
        p = nodes[n["parent"]]
        fig.add_scatter(x=[p["depth"], n["depth"]], y=[y[p["node"]], y[n["node"]]], mode="lines", opacity=opacity,
                        line=dict(color=colour, width=4 if n["fate"] == "accepted" else 1.5), hoverinfo="skip",
                        showlegend=False)
    for fate, (colour, opacity) in FATES.items():
        group = [n for n in nodes if n["fate"] == fate]
        if group:
            labelled = not crowded or fate in ("root", "accepted")
            fig.add_scatter(x=[n["depth"] for n in group], y=[y[n["node"]] for n in group],
                            mode="markers+text" if labelled else "markers",
                            text=[show_token(n["text"]) for n in group] if labelled else None,
                            textposition="middle right", textfont=dict(size=11),
                            marker=dict(size=12, color=colour, opacity=opacity), name=fate,
                            hovertext=[_hover(n) for n in group], hoverinfo="text")
    nxt = r["next"]
    last = nodes[nxt["after_node"]]
    fig.add_scatter(x=[last["depth"], last["depth"] + 1], y=[y[last["node"]]] * 2, mode="lines+markers+text",
                    line=dict(color=ADDED, width=3, dash="dot"), marker=dict(size=[0, 14], color=ADDED),
                    text=["", show_token(nxt["text"])], textposition="middle right",
                    name=f"target's token ({nxt['kind']}, from {nxt['drawn_from']})",
                    hovertext=["", escape(f"{token_text(nxt['text'])}: drawn with p {nxt['drawn_prob']:.3g}", quote=False)],
                    hoverinfo="text")
    fig.update_layout(title=f"round {r['round']}: {r['drafted']} drafts, {r['accepted']} accepted, tau {num(r['tau'])}",
                      # room on the right for the labels of the deepest column (they sit right of their node)
                      xaxis=dict(title="depth (tokens after the last committed one)", dtick=1,
                                 range=[-0.3, max(n["depth"] for n in nodes) + 1.8]),
                      yaxis=dict(visible=False), legend=dict(BELOW, y=-0.25),
                      height=int(min(1200, max(420, 180 + 22 * leaves))), margin=dict(b=110))
    add_caption(fig, f"the draft tree left to right: green the {r['accepted']} accepted drafts, red rejected, grey "
                     f"never tested; blue dotted: the target's own token; tau {num(r['tau'])} tokens this round"
                     + (" (labels on the path only: hover a node)" if crowded else "") + f" · {TOKEN_MARKS}")
    return fig


def tau_figure(trace: dict[str, Any]) -> go.Figure:
    s = trace["speculative"]
    taus = s["taus"]
    fig = go.Figure()
    fig.add_bar(x=list(range(len(taus))), y=taus, marker_color=ACCEPTED, name="tokens this round")
    fig.add_hline(y=s["tau"] or 0, line=dict(color=ADDED, dash="dash"))
    speed = ((trace.get("timing") or {}).get("speculative") or {}).get("measured_speedup")
    extra = f" · measured {speed:.2f}x vs plain decoding" if speed is not None else ""
    fig.update_layout(title=f"tau per round (mean {num(s['tau'])}){extra}", xaxis_title="round",
                      yaxis_title="tokens per target pass", xaxis=dict(dtick=1))
    add_caption(fig, f"bars: tokens each of the {len(taus)} rounds committed per target pass (accepted drafts + "
                     f"the target's own); dashed: the mean tau {num(s['tau'])}")
    return fig


def round_of_step(trace: dict[str, Any], step: int | None) -> int:
    """The round that produced ``step``'s token as the step records it; else the last round with a
    rejected draft, else the last round."""
    steps = trace.get("steps") or []
    if step is not None and 0 <= step < len(steps) and "speculative" in steps[step]:
        return steps[step]["speculative"]["round"]
    rounds = trace["rounds"]
    rejected = [r["round"] for r in rounds if any(n["fate"] == "rejected" for n in r["tree"])]
    return rejected[-1] if rejected else rounds[-1]["round"]


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """The selected step's round as a tree, tau over rounds and the break-even lanes; [] for any
    other trace."""
    if not trace.get("rounds") or not is_eagle(trace):
        return []
    return [View("EAGLE draft tree", figure=tree_figure(trace, round_of_step(trace, step))),
            View("tau per round", figure=tau_figure(trace)), *break_even.views(trace)]
