"""Warnings when the chain's stages fight, each read from the steps' recorded stages (their
``kept_count``, the tokens alive after them, whether the stage ``truncates``) and decisions; the order
is never changed, only described, and a warning names only the steps where what it says happened:

- a truncation that received one token and kept it, because an earlier stage had left only that
  one (its setting cannot matter there);
- a stage that spreads the mass over the whole vocabulary (adaptive-p's reshaping; a temperature,
  fixed or dynamic, above SPREADING_T) at steps where nothing in the chain cut a token: the tail of the
  vocabulary is lifted towards the top tokens, and the text can turn to noise;
- XTC whose recorded threshold is above 0.5 (compared as recorded, not rounded): two tokens can
  never both reach it, so it never acts; the warning counts the steps it acted at, from its record;
- min-p or top-p before top-nσ, at the steps where it removed tokens: top-nσ then measures its σ on
  fewer tokens, the tail gone (koboldcpp #1456; the top-nσ authors say it conflicts with top-p and
  min-p), so σ shrinks and top-nσ keeps less than on the tokens min-p or top-p received.

The page shows one line per stage: what a stage's warnings say, together.

Pure: no torch, no gradio.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.charts.common import View, escape

BEFORE_NSIGMA = ("min_p", "top_p")
XTC_NEVER_ACTS_ABOVE = 0.5  # two probabilities above one half would sum past 1
SPREADING_T = 1.5  # a temperature above it, with nothing cut, flattens the tail towards the top tokens


@dataclass(frozen=True)
class StageWarning:
    kind: str  # "no_op", "xtc_threshold" or "before_nsigma"
    stage: str
    text: str
    steps: tuple[int, ...]  # the steps it holds at


def _stages(step: dict[str, Any]) -> list[dict[str, Any]]:
    return list(step.get("stages") or [])


def _span(counts: list[int]) -> str:
    return f"{min(counts):,}" if min(counts) == max(counts) else f"{min(counts):,} to {max(counts):,}"


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
            if not stages[k].get("truncates"):
                continue
            ran[name] = ran.get(name, 0) + 1
            if stages[k - 1]["kept_count"] == 1 == stages[k]["kept_count"]:
                found.setdefault((name, _left_one(stages[:k])), []).append(i)
    return [StageWarning("no_op", name, f"{name} received a single token at {len(at)} of {ran[name]} steps "
                                        f"({culprit} had already left only that one): its setting could not "
                                        f"matter there", tuple(at))
            for (name, culprit), at in found.items()]


def _spreads(stage: dict[str, Any]) -> str | None:
    """What a stage did that spreads the mass over the vocabulary, in a few words; None if it did not."""
    decision = stage.get("decision") or {}
    if stage["name"] == "adaptive_p":
        return "reshaped"
    t = decision.get("t")
    if stage["name"] in ("temperature", "dynamic_temperature") and isinstance(t, (int, float)) and t > SPREADING_T:
        return f"flattened (T {t:.3g})"
    return None


def _spreading(steps: list[dict[str, Any]]) -> list[StageWarning]:
    """Stages that spread the mass over the whole vocabulary at steps where no stage of the chain cut a token."""
    found: dict[str, list[int]] = {}
    alive: dict[str, list[int]] = {}
    ran: dict[str, int] = {}
    for i, s in enumerate(steps):
        stages = _stages(s)
        uncut = len(stages) > 1 and all(st["kept_count"] == stages[0]["kept_count"] for st in stages)
        for st in stages[1:]:
            if st["name"] in ("adaptive_p", "temperature", "dynamic_temperature"):
                ran[st["name"]] = ran.get(st["name"], 0) + 1
            if uncut and _spreads(st):
                found.setdefault(st["name"], []).append(i)
                alive.setdefault(st["name"], []).append(int(stages[0]["kept_count"]))
    return [StageWarning("spreads", name,
                         f"{name} spread the mass over all {_span(alive[name])} tokens at {len(at)} of {ran[name]} "
                         f"steps with nothing cut: the tail is lifted towards the top tokens, and the text can "
                         f"turn to noise (put top-k, top-p or min-p in the chain)", tuple(at))
            for name, at in found.items()]


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
    return [*_xtc_threshold(steps), *_before_nsigma(steps), *_no_ops(steps), *_spreading(steps)]


def by_stage(warnings: list[StageWarning], step: int | None = None) -> list[tuple[str, str, bool]]:
    """One line per stage: (stage, what its warnings say, whether one of them holds at ``step``)."""
    lines: dict[str, tuple[list[str], bool]] = {}
    for w in warnings:
        texts, here = lines.setdefault(w.stage, ([], False))
        texts.append(w.text)
        lines[w.stage] = (texts, here or (step is not None and step in w.steps))
    return [(name, "; ".join(texts), here) for name, (texts, here) in lines.items()]


def warnings_html(warnings: list[StageWarning], step: int | None = None) -> str:
    items = []
    for name, text, here in by_stage(warnings, step):
        mark = " <b>(this step)</b>" if here else ""
        items.append(f'<li class="pg-stage-warning" data-stage="{escape(name)}">{escape(text)}{mark}</li>')
    return f'<ul class="pg-stage-warnings">{"".join(items)}</ul>'


def views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    warnings = stage_warnings(trace)
    return [View("Stages that fight", html=warnings_html(warnings, step))] if warnings else []
