"""Charts of the "what if" tab: sample-many bars and the score summary. Pure: no torch, no gradio.

Both read the JSON-ready dicts that ``playground.whatif.sample_many`` and ``playground.whatif.score`` build.
"""
from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from playground.charts.figures import prob_color, show_token
from playground.charts.palette import EXACT, SAMPLED


def sample_figure(result: dict[str, Any], top: int = 20) -> go.Figure:
    """Each outcome's sampled frequency next to its exact probability (the ``top`` most frequent or
    most probable), and one bar pair for everything else; the title carries the test."""
    outcomes = sorted(result["outcomes"], key=lambda o: (-max(o["frequency"], o["probability"] or 0.0), o["ids"]))
    shown, rest = outcomes[:top], outcomes[top:]
    labels = [_label(o) for o in shown]
    freq = [o["frequency"] for o in shown]
    exact = [o["probability"] for o in shown]
    if rest:
        labels.append(f"{len(rest)} more")
        freq.append(sum(o["frequency"] for o in rest))
        exact.append(None)
    fig = go.Figure()
    fig.add_bar(x=labels, y=freq, name=f"sampled ({result['n']} seeds)", marker_color=SAMPLED,
                hovertemplate="%{x}<br>frequency %{y:.4f}<extra></extra>")
    if any(p is not None for p in exact):
        fig.add_bar(x=labels, y=exact, name="exact probability", marker_color=EXACT,
                    hovertemplate="%{x}<br>exact %{y:.4f}<extra></extra>")
    fig.update_layout(title=_title(result), barmode="group", yaxis_title="share of samples",
                      xaxis_tickangle=-30, height=440, margin=dict(t=70, b=120),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


def _label(o: dict[str, Any]) -> str:
    text = "".join(show_token(p) for p in o["pieces"])
    return text if len(text) <= 40 else text[:39] + "…"


def _title(result: dict[str, Any]) -> str:
    test = result.get("chi_square")
    head = f"{result['n']} samples of {result['tokens']} tokens · {result['strategy']}"
    if test:
        return (f"{head}<br><sup>chi-square p = {test['p_value']:.3g} ({test['bins']} bins) · "
                f"total variation {result['tv_distance']:.3f} · reference: {result['reference']}</sup>")
    return f"{head}<br><sup>reference: {result['reference']}</sup>"


def sample_table_html(result: dict[str, Any], top: int = 30) -> str:
    """The outcomes as an HTML table (show_token escapes the model text)."""
    rows = []
    for o in result["outcomes"][:top]:
        exact = "–" if o["probability"] is None else f"{o['probability']:.4f}"
        seed = o["seeds"][0] if o["seeds"] else "–"
        rows.append(f"<tr><td>{o['count']}</td><td>{o['frequency']:.4f}</td><td>{exact}</td><td>{seed}</td>"
                    f"<td><code>{''.join(show_token(p) for p in o['pieces'])}</code></td></tr>")
    more = len(result["outcomes"]) - top
    foot = f"<p>… {more} more outcomes in the JSON.</p>" if more > 0 else ""
    timing = result["timing"]
    return (f"<p>{'Rows of one batched pass' if result['batched'] else 'One run per seed'}, "
            f"{timing['seconds']} s.</p><table class='pg-table'><tr><th>count</th><th>frequency</th>"
            f"<th>exact</th><th>first seed</th><th>outcome</th></tr>{''.join(rows)}</table>{foot}")


def score_html(summary: dict[str, Any]) -> str:
    """Perplexity, total log-probability, and a table of the text's tokens (coloured by probability)."""
    rows = []
    for t in summary["tokens"]:
        if t["prob"] is None:
            rows.append(f"<tr><td><code>{show_token(t['text'])}</code></td>"
                        f"<td colspan=5>context (nothing predicts the first token)</td></tr>")
            continue
        rows.append(f"<tr><td style='background:{prob_color(t['prob'])}'><code>"
                    f"{show_token(t['text'])}</code></td><td>{t['prob']:.4f}</td><td>{t['rank']}</td>"
                    f"<td>{t['surprisal']:.2f}</td><td>{t['entropy']:.2f}</td>"
                    f"<td><code>{show_token(t['greedy'])}</code></td></tr>")
    return (f"<p><b>perplexity {summary['perplexity']:.4g}</b> · total log-probability "
            f"{summary['total_logprob']:.4g} · scored {'as the answer to the prompt' if summary['mode'] == 'chat' else 'raw'}"
            f"</p><table class='pg-table'><tr><th>token</th><th>prob</th><th>rank</th><th>surprisal (bits)</th>"
            f"<th>entropy (nats)</th><th>greedy</th></tr>{''.join(rows)}</table>")
