"""Charts of the "what if" tab: sample-many bars and the score summary. Pure: no torch, no gradio.

Both read the JSON-ready dicts that ``playground.whatif.sample_many`` and ``playground.whatif.score`` build.
"""
from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go

from playground.charts.common import TOKEN_MARKS, add_caption, escape, show_token
from playground.charts.palette import EXACT, GUIDE, SAMPLED, TEMPLATE
from playground.charts.text import prob_color


def sample_figure(result: dict[str, Any], top: int = 20) -> go.Figure:
    """Each outcome's sampled frequency next to its exact probability (the ``top`` most frequent or
    most probable), and one bar pair for everything else; the title carries the test. With a
    grammar whose valid texts were all enumerated, a third bar: P(y | y valid), the model's own
    distribution restricted to the valid texts (the recorded number, never recomputed here)."""
    outcomes = sorted(result["outcomes"], key=lambda o: (-max(o["frequency"], o["probability"] or 0.0), o["ids"]))
    shown, rest = outcomes[:top], outcomes[top:]
    labels = [_label(o) for o in shown]
    freq = [o["frequency"] for o in shown]
    exact = [o["probability"] for o in shown]
    notes = [""] * len(shown)
    if rest:
        mass, label, note = rest_mass(shown, rest, not result.get("reference", "").startswith("none"))
        labels.append(label)
        freq.append(sum(o["frequency"] for o in rest))
        exact.append(mass)
        notes.append(f"<br>{note}")
    fig = go.Figure()
    fig.add_bar(x=labels, y=freq, name=f"sampled ({result['n']} seeds)", marker_color=SAMPLED, customdata=notes,
                hovertemplate="%{x}<br>frequency %{y:.4g}%{customdata}<extra></extra>")
    if any(p is not None for p in exact):
        fig.add_bar(x=labels, y=exact, name="exact probability", marker_color=EXACT, customdata=notes,
                    hovertemplate="%{x}<br>exact %{y:.4g}%{customdata}<extra></extra>")
    conditional = _conditional(result)
    if conditional:
        fig.add_bar(x=labels, y=[conditional.get(tuple(o["ids"])) for o in shown] + ([None] if rest else []),
                    name="P(y | y valid): the model restricted to valid texts", marker_color=GUIDE,
                    hovertemplate="%{x}<br>P(y | y valid) %{y:.4g}<extra></extra>")
    fig.update_layout(template=TEMPLATE, title=_title(result), barmode="group", yaxis_title="share of samples",
                      xaxis_tickangle=-30, height=440, margin=dict(t=70, b=120),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    drawn = [o for o in result["outcomes"] if o["count"]]
    add_caption(fig, f"blue: the share of the {result['n']} samples that wrote each outcome ({len(drawn)} distinct); "
                     "orange: its exact probability under the strategy's distribution"
                + ("; the last pair: every outcome not among the bars" if rest else "") + f" · {TOKEN_MARKS}")
    return fig


def rest_mass(shown: list[dict[str, Any]], rest: list[dict[str, Any]], reference: bool
              ) -> tuple[float | None, str, str]:
    """The last bar pair's exact mass, its label and a sentence saying what the mass is. Against an exact
    reference (``reference``: the outcomes' probabilities sum to 1) the mass of every outcome not among the
    bars, 1 minus theirs: the ``rest`` recorded and those never drawn nor enumerated, the same outcomes
    as the sampled bar beside it. Without one, the recorded probabilities of ``rest`` alone, labelled so;
    None ("not enumerated") where an outcome it sums has no recorded probability."""
    summed = shown if reference else rest
    missing = sum(o["probability"] is None for o in summed)
    if missing:
        return None, f"{len(rest)} more · exact not enumerated", (
            f"exact mass not enumerated: {missing} of these {len(summed)} outcomes have no recorded probability")
    if reference:
        mass = max(0.0, 1.0 - math.fsum(o["probability"] for o in shown))
        return mass, f"every other outcome ({len(rest)} more recorded) · exact {mass:.4g}", (
            f"exact mass {mass:.6g}: every outcome not among the bars, 1 minus the bars' exact probabilities "
            f"(the {len(rest)} more recorded and those never drawn)")
    mass = math.fsum(o["probability"] for o in rest)
    return mass, f"{len(rest)} more · these summed {mass:.4g}", (
        f"exact mass {mass:.6g}: the recorded probabilities of these {len(rest)} drawn outcomes alone, summed "
        "(no exact reference for this strategy: outcomes never drawn are not counted)")


def exact_text(p: float) -> str:
    """An outcome's exact probability for the table: 4 significant digits, scientific below 0.001, so a
    drawn outcome never reads 0 (a probability that underflowed to 0 says it is below float range)."""
    if p == 0:
        return "< 1e-308"
    return f"{p:.4g}" if p >= 1e-3 else f"{p:.3e}"


def _nats(t: dict[str, Any]) -> str:
    """A token's surprisal in nats, -log p: the recorded log-probability (the summary's ``surprisal`` is
    in bits, converted by ln 2 when no log-probability is recorded)."""
    if t.get("logprob") is not None:
        return f"{-float(t['logprob']):.2f}"
    return f"{float(t['surprisal']) * math.log(2):.2f}"


def _conditional(result: dict[str, Any]) -> dict[tuple[int, ...], float]:
    gap = result.get("grammar") or {}
    return {tuple(v["ids"]): v["conditional"] for v in gap.get("valid") or []} if gap.get("enumerated") else {}


def _label(o: dict[str, Any]) -> str:
    text = "".join(show_token(p) for p in o["pieces"])
    return text if len(text) <= 40 else text[:39] + "…"


def _title(result: dict[str, Any]) -> str:
    test = result.get("chi_square")
    head = f"{result['n']} samples of {result['tokens']} tokens · {result['strategy']}"
    gap = result.get("grammar") or {}
    if gap.get("chi_square_masked") and gap.get("chi_square_conditional"):
        return (f"{head} · constrained is not conditioned<br><sup>chi-square against masked sampling's exact "
                f"p = {gap['chi_square_masked']['p_value']:.3g} · against P(y | y valid) "
                f"p = {gap['chi_square_conditional']['p_value']:.3g} (total variation "
                f"{gap['tv_conditional']:.3f})</sup>")
    if test:
        return (f"{head}<br><sup>chi-square p = {test['p_value']:.3g} ({test['bins']} bins) · "
                f"total variation {result['tv_distance']:.3f} · reference: {result['reference']}</sup>")
    return f"{head}<br><sup>reference: {result['reference']}</sup>"


def sample_table_html(result: dict[str, Any], top: int = 30) -> str:
    """The outcomes as an HTML table (show_token escapes the model text)."""
    rows = []
    for o in result["outcomes"][:top]:
        exact = "–" if o["probability"] is None else exact_text(o["probability"])
        seed = o["seeds"][0] if o["seeds"] else "–"
        rows.append(f"<tr><td>{o['count']}</td><td>{o['frequency']:.4f}</td><td>{exact}</td><td>{seed}</td>"
                    f"<td><code>{''.join(show_token(p) for p in o['pieces'])}</code></td></tr>")
    more = len(result["outcomes"]) - top
    foot = f"<p>… {more} more outcomes in the JSON download.</p>" if more > 0 else ""
    timing = result["timing"]
    return (f"{gap_html(result)}<p>{'Rows of one batched pass' if result['batched'] else 'One run per seed'}, "
            f"{_weights(result)}{timing['seconds']} s.</p><table class='pg-table'><tr><th>count</th><th>frequency</th>"
            f"<th>exact</th><th>first seed</th><th>outcome</th></tr>{''.join(rows)}</table>{foot}")


def gap_html(result: dict[str, Any], top: int = 30) -> str:
    """With a grammar: the sentence on what the gap means, both tests, and each valid text's frequency,
    masked-sampling probability, P(y | y valid) and the model's own probability ("" without one)."""
    gap = result.get("grammar")
    if not gap:
        return ""
    if not gap.get("enumerated"):
        return f"<p class='pg-grammar-gap'>{escape(gap.get('note', ''))}</p>"
    tests = []
    for name, label in (("masked", "masked sampling's exact probabilities"), ("conditional", "P(y | y valid)")):
        test = gap.get(f"chi_square_{name}")
        if test:
            tests.append(f"against {label}: chi-square {test['statistic']:.4g}, df {test['df']}, "
                         f"p = {test['p_value']:.3g}, total variation {gap[f'tv_{name}']:.3f}")
    rows = [f"<tr><td>{v['count']}</td><td>{v['frequency']:.4f}</td><td>{v['masked']:.4g}</td>"
            f"<td>{v['conditional']:.4g}</td><td>{v['model']:.3g}</td>"
            f"<td><code>{''.join(show_token(p) for p in v['pieces'])}</code></td></tr>" for v in gap["valid"][:top]]
    return (f"<p class='pg-grammar-gap'><b>Constrained is not conditioned.</b> {escape(gap['meaning'])}</p>"
            f"<p>{escape('; '.join(tests))}. The model gives the valid texts {gap['valid_mass']:.4g} of its "
            f"probability in all.</p><table class='pg-table'><tr><th>count</th><th>frequency</th>"
            f"<th>masked sampling</th><th>P(y | y valid)</th><th>model P(y)</th><th>valid text</th></tr>"
            f"{''.join(rows)}</table>")


def _weights(result: dict[str, Any]) -> str:
    """"{model} in {dtype} weights, " for a result that records its weights ("" for one that does not)."""
    return f"{escape(result['model'])} in {escape(result['dtype'])} weights, " if result.get("dtype") else ""


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
                    f"<td>{_nats(t)}</td><td>{t['entropy']:.2f}</td>"
                    f"<td><code>{show_token(t['greedy'])}</code></td></tr>")
    g = summary.get("grammar")
    where = "" if not g else (
        f"<p class='pg-grammar-gap'>The text leaves the grammar at token {g['leaves_at']} "
        f"(<code>{show_token(g['token'])}</code>): {escape(g['message'])}</p>" if g["leaves_at"] is not None else
        f"<p class='pg-grammar-gap'>The text stays in the grammar"
        f"{' and is a whole valid text' if g['whole'] else ' but is not yet a whole valid text'}.</p>")
    return (f"{where}<p><b>perplexity {summary['perplexity']:.4g}</b> · total log-probability "
            f"{summary['total_logprob']:.4g} · scored {'as the answer to the prompt' if summary['mode'] == 'chat' else 'raw'}"
            f"{' · ' + _weights(summary).rstrip(', ') if summary.get('dtype') else ''}</p><table class='pg-table'><tr><th>token</th><th>prob</th><th>rank</th><th>surprisal (nats)</th>"
            f"<th>entropy (nats)</th><th>greedy</th></tr>{''.join(rows)}</table>")
