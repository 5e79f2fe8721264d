"""The generated text as HTML, each token coloured by the model's probability of it, with its tip
(probability, rank, alternatives), the marks of forced tokens, DRY's repeat and the recorded loops, and the
colour key.

Token text is model output: every piece of it is escaped before it goes into HTML. Pure: no torch,
no gradio.
"""
from __future__ import annotations

import math
from typing import Any

from playground.charts.common import as_prob, escape, prob_brief, token_text
from playground.charts.marks import disallowed_ids, grammar_forced
from playground.charts.palette import CONFIDENT, GRAMMAR_FORCED, PENALISED, SURPRISING, UNSURE, rgb, rgba
from playground.charts.phases import THINKING, forced_tip


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
    looped = loop_marks(trace)
    for i, tok in enumerate(tokens):
        p_raw = math.exp(tok["raw_logprob"]) if tok.get("raw_logprob") is not None else 0.0
        p = math.exp(tok["logprob"]) if tok.get("logprob") is not None else 0.0
        tip = _token_tip(trace, i, tok, p, p_raw, steps[i] if aligned else None, alternatives)
        special = i == last and trace.get("finish_reason") == "eos"
        forced = aligned and bool(steps[i].get("forced"))
        if forced and steps[i].get("forced") == "budget":
            tip += "\n" + forced_tip(steps[i])
        elif forced:
            tip += ("\nforced (a branch): the strategy would have taken "
                    f"{token_text(steps[i].get('strategy_choice_text', '?'))}")
        thinking = aligned and steps[i].get("phase") == THINKING
        by_grammar = aligned and grammar_forced(steps[i])
        if by_grammar:
            tip += "\nforced by the grammar: the only token it allowed here"
        classes = ("pg-tok" + (" pg-special" if special else "") + (" pg-sel" if i == selected else "")
                   + (" pg-forced" if forced else "") + (" pg-grammar-forced" if by_grammar else "")
                   + (" pg-thinking" if thinking else ""))
        if i in looped:
            classes += " pg-loop" + (" pg-loop-copy" if looped[i][0] else "")
            tip += "\n" + looped[i][1]
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


def loop_marks(trace: dict[str, Any]) -> dict[int, tuple[bool, str]]:
    """Generated-token index -> (does a copy of the loop start here?, the tip's line) for every token of a
    recorded loop (the trace's ``loops``: ``length`` tokens from ``start``, copies of ``period``)."""
    marks: dict[int, tuple[bool, str]] = {}
    for k, lp in enumerate(trace.get("loops") or []):
        for i in range(lp["start"], lp["start"] + lp["length"]):
            copy = (i - lp["start"]) // lp["period"] + 1
            marks[i] = ((i - lp["start"]) % lp["period"] == 0,
                        f"loop {k + 1} ({token_text(lp['text'])}, period {lp['period']}): copy {copy} of "
                        f"{lp['repeats']}" + ("" if copy <= lp["repeats"] else " (part)"))
    return marks


def _token_tip(trace: dict[str, Any], i: int, tok: dict[str, Any], p: float, p_raw: float,
               step: dict[str, Any] | None, alternatives: int) -> str:
    lines = [f"step {i} · {token_text(tok['text'])}", f"model p {prob_brief(p_raw)} (the model's own distribution)",
             f"drawn with p {prob_brief(p)} (the distribution it was drawn from)"
             + (f" · log p {tok['logprob']:.3f}" if tok.get("logprob") is not None else "")]
    if step is not None:
        cands = sorted(step["candidates"], key=lambda c: -as_prob(c["raw_prob"]))
        rank = next((r + 1 for r, c in enumerate(cands) if c["id"] == tok["id"]), None)
        if rank is not None:
            lines[1] += f" · rank {rank}"
        banned = disallowed_ids(step)
        alts = [f"{token_text(c['text'])} {prob_brief(as_prob(c['raw_prob']))}"
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
            ' · dashed underline: forced (a branch, a thinking budget) · italic: thinking · dotted: forced by the grammar · bar over: a loop</span></div>')
