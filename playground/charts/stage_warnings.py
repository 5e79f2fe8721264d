"""Warnings when the chain's stages fight, read from the run's recorded stages and decisions (the
order is never changed, only described):

- a truncation that kept everything it received because an earlier stage had left one token (it
  did nothing at that step; its setting cannot matter there);
- XTC with a threshold above 0.5: two tokens can never both pass it, so it never acts;
- min-p or top-p before top-nσ: they remove the tail that top-nσ measures its σ on (koboldcpp
  #1456; the top-nσ authors say it conflicts with top-p and min-p), so σ shrinks and top-nσ keeps
  less than on the full distribution.

Pure: no torch, no gradio.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.charts.common import View, escape

BEFORE_NSIGMA = ("min_p", "top_p")
# the stages that cut tokens: those whose mark in figures.STAGE_MARKS truncates (a test holds them so;
# figures draws these warnings under the chain, so this module cannot import it)
TRUNCATIONS = ("top_k", "top_p", "min_p", "typical_p", "epsilon", "eta", "top_nsigma", "xtc", "mirostat",
               "no_repeat_ngram", "word_bias", "top_h", "p_less", "grammar")


@dataclass(frozen=True)
class StageWarning:
    kind: str  # "no_op", "xtc_threshold" or "before_nsigma"
    stage: str
    text: str
    steps: tuple[int, ...]  # the steps it holds at


def _names(step: dict[str, Any]) -> list[str]:
    return [st["name"] for st in step.get("stages") or []]


def _no_ops(steps: list[dict[str, Any]]) -> list[StageWarning]:
    """Truncations that received one token: an earlier stage had already left only it."""
    found: dict[tuple[str, str], list[int]] = {}
    for i, s in enumerate(steps):
        stages = s.get("stages") or []
        for k in range(2, len(stages)):
            if stages[k]["name"] in TRUNCATIONS and stages[k - 1]["kept_count"] == 1:
                culprit = next(st["name"] for st in stages[1:k] if st["kept_count"] == 1)
                found.setdefault((stages[k]["name"], culprit), []).append(i)
    return [StageWarning("no_op", name, f"{name} kept everything at {len(at)} of {len(steps)} steps: "
                                        f"{culprit} had already left one token", tuple(at))
            for (name, culprit), at in found.items()]


def _xtc_threshold(steps: list[dict[str, Any]]) -> list[StageWarning]:
    at = [i for i, s in enumerate(steps) for st in s.get("stages") or []
          if st["name"] == "xtc" and (st.get("decision") or {}).get("threshold", 0) > 0.5]
    if not at:
        return []
    threshold = next(st["decision"]["threshold"] for st in steps[at[0]]["stages"] if st["name"] == "xtc")
    return [StageWarning("xtc_threshold", "xtc", f"XTC never acts: its threshold {threshold:g} is above 0.5, and "
                                                 f"two tokens cannot both have a probability above 0.5", tuple(at))]


def _before_nsigma(steps: list[dict[str, Any]]) -> list[StageWarning]:
    out = []
    for name in BEFORE_NSIGMA:
        at, alive = [], []
        for i, s in enumerate(steps):
            names = _names(s)
            if name in names and "top_nsigma" in names and names.index(name) < names.index("top_nsigma"):
                at.append(i)
                alive.append(s["stages"][names.index("top_nsigma") - 1]["kept_count"])
        if at:
            counts = f"{min(alive)}" if min(alive) == max(alive) else f"{min(alive)} to {max(alive)}"
            out.append(StageWarning("before_nsigma", name, f"{name} runs before top_nsigma: top-nσ measured its σ on "
                                                           f"{counts} tokens, not the whole distribution (put "
                                                           f"top_nsigma first)", tuple(at)))
    return out


def stage_warnings(trace: dict[str, Any]) -> list[StageWarning]:
    steps = list(trace.get("steps") or [])
    return [*_xtc_threshold(steps), *_before_nsigma(steps), *_no_ops(steps)]


def warnings_html(warnings: list[StageWarning], step: int | None = None) -> str:
    items = []
    for w in warnings:
        here = " <b>(this step)</b>" if step is not None and step in w.steps else ""
        items.append(f'<li class="pg-stage-warning" data-kind="{escape(w.kind)}">{escape(w.text)}{here}</li>')
    return f'<ul class="pg-stage-warnings">{"".join(items)}</ul>'


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    warnings = stage_warnings(trace)
    return [View("Stages that fight", html=warnings_html(warnings, step))] if warnings else []
