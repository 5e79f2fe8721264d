"""Warnings when the chain's stages fight, each read from the steps' recorded stages (their
``kept_count``, the tokens alive after them) and decisions; the order is never changed, only
described, and a warning names only the steps where what it says happened:

- a truncation that received one token and kept it, because an earlier stage had left only that
  one (its setting cannot matter there);
- XTC whose recorded threshold is above 0.5 (compared as recorded, not rounded): two tokens can
  never both reach it, so it never acts; the warning counts the steps it acted at, from its record;
- min-p or top-p before top-nσ, at the steps where it removed tokens: top-nσ then measures its σ on
  fewer tokens, the tail gone (koboldcpp #1456; the top-nσ authors say it conflicts with top-p and
  min-p), so σ shrinks and top-nσ keeps less than on the tokens min-p or top-p received.

Pure: no torch, no gradio.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.charts.common import View, escape

BEFORE_NSIGMA = ("min_p", "top_p")
XTC_NEVER_ACTS_ABOVE = 0.5  # two probabilities above one half would sum past 1
# the stages that cut tokens: those whose mark in marks.STAGE_MARKS truncates (a test holds them so;
# the waterfall draws these warnings under the chain)
TRUNCATIONS = ("top_k", "top_p", "min_p", "typical_p", "epsilon", "eta", "top_nsigma", "xtc", "mirostat",
               "no_repeat_ngram", "word_bias", "top_h", "p_less", "grammar")


@dataclass(frozen=True)
class StageWarning:
    kind: str  # "no_op", "xtc_threshold" or "before_nsigma"
    stage: str
    text: str
    steps: tuple[int, ...]  # the steps it holds at


def _stages(step: dict[str, Any]) -> list[dict[str, Any]]:
    return list(step.get("stages") or [])


def _span(counts: list[int]) -> str:
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)} to {max(counts)}"


def _left_one(stages: list[dict[str, Any]]) -> str:
    """The stage that brought ``stages`` (raw first) down to one token; the model where raw had one."""
    return next((b["name"] for a, b in zip(stages, stages[1:]) if a["kept_count"] > 1 == b["kept_count"]),
                "the model")


def _no_ops(steps: list[dict[str, Any]]) -> list[StageWarning]:
    """Truncations that received one token and kept it: an earlier stage had already left only it."""
    found: dict[tuple[str, str], list[int]] = {}
    ran: dict[str, int] = {}
    for i, s in enumerate(steps):
        stages = _stages(s)
        for k in range(1, len(stages)):
            name = stages[k]["name"]
            if name not in TRUNCATIONS:
                continue
            ran[name] = ran.get(name, 0) + 1
            if stages[k - 1]["kept_count"] == 1 == stages[k]["kept_count"]:
                found.setdefault((name, _left_one(stages[:k])), []).append(i)
    return [StageWarning("no_op", name, f"{name} kept everything at {len(at)} of {ran[name]} steps: "
                                        f"{culprit} had already left one token", tuple(at))
            for (name, culprit), at in found.items()]


def _xtc_threshold(steps: list[dict[str, Any]]) -> list[StageWarning]:
    """XTC stages whose recorded threshold is above 0.5, with the steps it acted at (from its record)."""
    high = [(i, st["decision"]) for i, s in enumerate(steps) for st in _stages(s)
            if st["name"] == "xtc" and (st.get("decision") or {}).get("threshold") is not None
            and st["decision"]["threshold"] > XTC_NEVER_ACTS_ABOVE]
    if not high:
        return []
    thresholds = sorted({d["threshold"] for _, d in high})
    said = " and ".join(repr(t) for t in thresholds)
    acted = sum(bool(d.get("acted")) for _, d in high)
    return [StageWarning("xtc_threshold", "xtc", f"XTC acted at {acted} of {len(high)} steps: its threshold {said} "
                                                 f"is above 0.5, and two tokens cannot both have a probability "
                                                 f"above 0.5", tuple(i for i, _ in high))]


def _before_nsigma(steps: list[dict[str, Any]]) -> list[StageWarning]:
    """min-p / top-p before top-nσ, at the steps where they removed tokens (their kept_count fell)."""
    out = []
    for name in BEFORE_NSIGMA:
        ran, at, received, removed, measured = 0, [], [], [], []
        for i, s in enumerate(steps):
            stages = _stages(s)
            names = [st["name"] for st in stages]
            if name not in names or "top_nsigma" not in names or names.index(name) > names.index("top_nsigma"):
                continue
            ran += 1
            j, n = names.index(name), names.index("top_nsigma")
            cut = stages[j - 1]["kept_count"] - stages[j]["kept_count"]
            if cut > 0:
                at.append(i)
                received.append(stages[j - 1]["kept_count"])
                removed.append(cut)
                measured.append(stages[n - 1]["kept_count"])
        if at:
            out.append(StageWarning(
                "before_nsigma", name,
                f"{name} runs before top_nsigma and removed tokens at {len(at)} of {ran} steps ({_span(removed)} "
                f"of the {_span(received)} it received): there top-nσ measured its σ on {_span(measured)} tokens "
                f"(put top_nsigma first)", tuple(at)))
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
