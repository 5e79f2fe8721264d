"""How each stage of the chain is marked on the step charts, and what they read from a step's record.

Per step the chain's stages (``steps[i]["stages"]``: "raw" first, then one per transform in chain
order) each carry their distribution over the candidates, their kept flags and the decision they
made on the distribution they received (their ``decision``). A chart never recomputes a decision:
it draws the record, over the distribution the stage received.

Each stage listed in ``STAGE_MARKS`` gets its mark from its own record: a line at a probability it
used (min-p's threshold, top-k's cut), its running mass with its target (top-p; Holtzman et al.
2019), a rank cut, the ids it touched (the penalty), or the ids it does not allow (the grammar).
The stages that truncate decide which distribution the bars show (``bar_stage``).

A new stage gets its marks by recording its decision and adding one ``Mark`` here.
"""
from __future__ import annotations

from dataclasses import dataclass
from string import Formatter
from typing import Any, Callable

from playground.charts.common import as_prob
from playground.charts.palette import (
    BANNED,
    CUMULATIVE,
    DISALLOWED,
    ENTROPY,
    EPSILON,
    ETA,
    MIN_P,
    MIROSTAT,
    NSIGMA,
    PENALISED,
    TOP_K,
    TYPICAL,
    XTC,
)


@dataclass(frozen=True)
class Mark:
    """How one stage's recorded decision is drawn over the distribution that stage received.

    kind:
      "level": a horizontal line at ``decision[key]``, a probability on the stage's input;
      "mass": the stage's running mass (``decision[curve]``, one value per candidate) on the
              right axis, with a line at ``decision[key]``;
      "rank": a vertical cut after the stage's ``kept_count`` bars when the bars are the stage's
              input and the tokens it kept are the leading bars; else a "level" line at ``decision[key]``;
      "ids": the bars of the candidate ids listed in ``decision[key]`` are marked;
      "mask": the bars of the candidate ids *not* listed in ``decision[key]`` are crossed (a grammar:
              its record lists what it allows).
    label: the line's text, formatted with the decision's fields; summary: the captions' and the
    waterfall panel's; panel: a shorter one for the panel (narrow beside the others), where set.
    """

    kind: str
    key: str
    label: str
    summary: str
    color: str
    curve: str = ""
    panel: str = ""


# Stages drawn from their decision; a stage without an entry still gets its kept flags drawn.
STAGE_MARKS: dict[str, Mark] = {
    "penalty": Mark("ids", "ids", "penalised ÷/× {penalty:g}", "×{penalty:g} on {touched} ids", PENALISED),
    "top_k": Mark("rank", "cut_prob", "top-k {k} (p ≥ {cut_prob:.3g})", "k {k}", TOP_K),
    "top_p": Mark("mass", "p", "top-p {p:g}", "p {p:g} · mass {mass:.3f}", CUMULATIVE, curve="cumulative"),
    "min_p": Mark("level", "threshold", "min-p {min_p:g} × top {top_prob:.3f} = {threshold:.3g}",
                  "p ≥ {threshold:.3g}", MIN_P),
    "typical_p": Mark("mass", "p", "typical {p:g} (H {entropy:.2f} nats)", "mass {p:g} · H {entropy:.2f}", TYPICAL,
                      curve="cumulative"),
    "epsilon": Mark("level", "threshold", "ε {epsilon:g}", "p ≥ {threshold:.3g}", EPSILON),
    "eta": Mark("level", "threshold", "η: min({eta:g}, √η·e^−H) = {threshold:.3g}", "p ≥ {threshold:.3g}",
                ETA),
    "top_nsigma": Mark("level", "threshold_prob", "top-nσ: logit ≥ max − {n:g}σ (p ≥ {threshold_prob:.3g})",
                       "{n:g}σ = {sigma:.3g} · p ≥ {threshold_prob:.3g}", NSIGMA),
    # XTC removes what lies at or above its line (but the least probable of those), when its coin says so;
    # {reason} is why it did or did not act, read off its record (``xtc_reason``)
    "xtc": Mark("level", "threshold", "XTC removes p ≥ {threshold:g} · {reason}", "{reason}", XTC,
                panel="coin {coin_text} · {verdict}"),
    "mirostat": Mark("level", "threshold", "mirostat μ {mu:.2f} bits: p ≥ 2^−μ = {threshold:.3g}",
                     "μ {mu:.2f} → {mu_after:.2f}", MIROSTAT),
    "presence_frequency": Mark("ids", "ids", "penalised −{presence:g} if seen, −{frequency:g} × count",
                               "{touched} ids of {counted} tokens", PENALISED),
    "dry": Mark("ids", "ids", "DRY −{multiplier:g}×{base:g}^(n−{allowed_length})", "longest repeat {match_length}",
                PENALISED),
    "no_repeat_ngram": Mark("ids", "ids", "banned: would repeat a {n}-gram", "{banned} banned", BANNED),
    "top_h": Mark("rank", "cut_prob", "top-H {h:g}: entropy kept ≤ {tau:.3g} nats (p ≥ {cut_prob:.3g})",
                  "τ {tau:.3g} of H {entropy:.3g}", ENTROPY),
    "p_less": Mark("level", "threshold", "p-less: p ≥ Σp² = {threshold:.3g}", "p ≥ Σp² = {threshold:.3g}",
                   EPSILON),
    "word_bias": Mark("ids", "ids", "biased by word", "{banned} banned", BANNED),
    "grammar": Mark("mask", "allowed", "not allowed by the grammar",
                    "{allowed_count:,} allowed · Z {z:.3g}", DISALLOWED),
}
STAGE_SUMMARIES = {"temperature": "T {t:g}",  # waterfall titles of the stages that draw no mark
                   "dynamic_temperature": "T {t:.3g} · H/log N {normalized:.2f}",
                   "adaptive_p": "aims at p {adapted:.3f} · average {average:.3f}",
                   "watermark": "δ {delta:g} · green mass {green_mass_before:.2f} → {green_mass_after:.2f}",
                   "synthid": "{depth} layers · expected g {g_mass_before:.2f} → {g_mass_after:.2f}"}


def stages_of(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's recorded stages, "raw" first; empty when it has none."""
    return list(step.get("stages") or [])


def grammar_decision(step: dict[str, Any]) -> dict[str, Any] | None:
    """The grammar stage's recorded decision at ``step``; None when its chain has no grammar."""
    return next((st.get("decision") or {} for st in stages_of(step) if st["name"] == "grammar"), None)


def disallowed_ids(step: dict[str, Any]) -> set[int]:
    """The step's candidate ids the grammar stage did not allow (its record lists those it allows)."""
    d = grammar_decision(step)
    if d is None or d.get("allowed") is None:
        return set()
    allowed = set(d["allowed"])
    return {c["id"] for c in step["candidates"] if c["id"] not in allowed}


def grammar_forced(step: dict[str, Any]) -> bool:
    """The grammar allowed exactly one token at ``step`` (as recorded)."""
    return bool((grammar_decision(step) or {}).get("forced"))


def _truncates(stage: dict[str, Any]) -> bool:
    """Whether the stage is one that removes tokens, as its record says (strategies/stages.py registers it)."""
    return bool(stage.get("truncates"))


def _bar_index(stages: list[dict[str, Any]]) -> int:
    """The stage whose output the bars show: the one before the first truncating stage (the last one
    when none truncates)."""
    first_cut = next((i for i, st in enumerate(stages) if i and _truncates(st)), len(stages))
    return first_cut - 1


# what the selector did with the final distribution (the dashes of the distribution chart), per selector
SELECTOR_USE = {"multinomial": "after chain (sampled from)", "greedy": "after chain (argmax taken)",
                "gumbel": "after chain (Gumbel-max over it)",
                "beam": "entered the beam (p adds to the beam score)",
                "gumbel-top-k": "entered the beam (Gumbel-top-k)",
                "contrastive": "contrastive scores as p (the argmax is taken)"}


def selector_label(trace: dict[str, Any], step: dict[str, Any] | None = None) -> str:
    """The name of the final distribution, by what the recorded selector did with it: sampling draws
    from it, greedy takes its argmax, beam search keeps the tokens that entered the beam."""
    names = [st["name"] for st in stages_of(step or {})][-1:] + list(reversed(trace.get("chain") or []))
    return next((SELECTOR_USE[n] for n in names if n in SELECTOR_USE), "after chain")


BASES = ("chain", "model", "final")  # what the distribution chart's bars show; see bar_stage


def basis_index(stages: list[dict[str, Any]], basis: str) -> int:
    """Which of a step's recorded ``stages`` the bars show on ``basis`` (see ``bar_stage``); two bases
    name one stage where the step recorded nothing between them (beam search: no cut before its selection)."""
    return {"model": 0, "final": len(stages) - 1}.get(basis, _bar_index(stages))


SELECTIONS = {"beam": "entered the beam", "gumbel-top-k": "entered the beam"}  # a search's selection stage


def selection_of(stage: dict[str, Any]) -> str | None:
    """What a search's recorded selection stage (beam search's "beam", stochastic beam's "gumbel-top-k")
    kept, in a few words: the candidates that won a slot keep their probability, the rest are dropped;
    None for any other stage."""
    return SELECTIONS.get(stage["name"])


def bar_stage(step: dict[str, Any], basis: str = "chain") -> tuple[str, list[float]]:
    """(label, probs over the step's candidates) of the distribution the bars show.

    ``basis`` "chain": the one that entered the first truncation (without any truncation, the final
    one); "model": the model's own distribution; "final": the one after every stage (what the
    selector drew from). Without stages (greedy, or no transform active) it is the model's own.
    """
    stages = stages_of(step)
    if not stages:
        return "model p", [as_prob(c["raw_prob"]) for c in step["candidates"]]
    entering = stages[basis_index(stages, basis)]
    label = ("model p" if entering["name"] == "raw" else SELECTOR_USE.get(entering["name"])
             or f"p after {display_name(entering['name'])}")
    return label, [as_prob(p) for p in entering["probs"]]


def display_name(name: str) -> str:
    """A stage's name as the charts write it ("top_p" -> "top-p")."""
    return name.replace("_", "-")


def _beside(coin: float, probability: float) -> str:
    """``coin`` with the fewest decimals (two at least) that keep it on its recorded side of ``probability``:
    a coin of 0.4996 against 0.5 reads 0.4996, never 0.50 (nor 0.5001 as 0.50, which only 0.5 itself reads)."""
    below = coin < probability
    for digits in range(2, 7):
        text = f"{coin:.{digits}f}"
        if (float(text) < probability) == below and (float(text) != probability or coin == probability):
            return text
    return repr(coin)


def xtc_reason(decision: dict[str, Any]) -> str:
    """Why XTC did or did not act at a step, in words, from its record alone: it acted (``acted``), and
    removed ``removed`` tokens; or its ``coin`` was not under its ``probability``; or the coin was under
    it and it still did not act, which its rule allows only when fewer than two tokens reached its
    ``threshold``. Empty when a field is missing."""
    coin, probability = decision.get("coin"), decision.get("probability")
    if coin is None or probability is None or decision.get("acted") is None:
        return ""
    compared = f"coin {_beside(coin, probability)} {'<' if coin < probability else '≥'} probability {probability:g}"
    if decision["acted"]:
        removed = decision.get("removed")
        return f"{compared}: acted" + (f", removed {removed}" if removed is not None else "")
    if coin >= probability:
        return f"{compared}: did not act"
    threshold = decision.get("threshold")
    return (f"{compared}, but fewer than two tokens ≥ threshold "
            f"{'?' if threshold is None else f'{threshold:g}'}: nothing to remove")


# words read off a stage's record for its Mark's label and summary (``described``): never a new decision
def _xtc_readings(decision: dict[str, Any]) -> dict[str, str | None]:
    """``reason`` in full (the line's label, the captions) and ``verdict``, its last words (a panel's
    title, narrow beside two others)."""
    reason = xtc_reason(decision)
    if not reason:  # no coin recorded: null readings, so the label that names them is left out
        return {"reason": None, "verdict": None, "coin_text": None}
    return {"reason": reason, "verdict": reason.rpartition(": ")[2],
            "coin_text": _beside(decision["coin"], decision["probability"])}


READINGS: dict[str, Callable[[dict[str, Any]], dict[str, str | None]]] = {"xtc": _xtc_readings}


def described(template: str, decision: dict[str, Any], stage: str = "") -> str:
    """``template`` filled from a decision (and the readings of ``stage``'s record, ``READINGS``); empty
    when the stage recorded no decision or a field the template names is null (a value recorded as -inf
    or NaN). A field the record lacks is a template out of step with its stage: KeyError, naming both."""
    fields = {**decision, **READINGS[stage](decision)} if stage in READINGS and decision else decision
    names = {name.split(".")[0].split("[")[0] for _, name, _, _ in Formatter().parse(template) if name}
    missing = sorted(names - set(fields))
    if missing and not decision:
        return ""
    if missing:
        raise KeyError(f"{stage or 'a stage'}'s text {template!r} names {', '.join(missing)}, which its record "
                       f"lacks (it has {', '.join(sorted(fields))})")
    if any(fields[name] is None for name in names):
        return ""
    return template.format(**fields)


def stage_summary(stage: dict[str, Any], panel: bool = False) -> str:
    """A stage's recorded decision in a few words, for a caption; ``panel``: for its waterfall panel's title."""
    mark = STAGE_MARKS.get(stage["name"])
    template = ((mark.panel if panel and mark.panel else mark.summary) if mark
                else STAGE_SUMMARIES.get(stage["name"], ""))
    return described(template, stage.get("decision") or {}, stage["name"])
