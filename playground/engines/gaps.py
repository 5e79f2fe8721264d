"""What an engine cannot express of a run, in a person's words: a stage it lacks, an order it fixes that the
run did not follow, a value outside what it takes, a seed that draws other numbers, the answer's own chain
of a run in two phases. The engine-specific lines (a window, a grammar, stop strings, a thinking budget)
come from each export module; ``formats.export`` joins them.
"""
from __future__ import annotations

from playground.engines.facts import STAGE_WORDS, EngineFacts
from playground.engines.settings import RunSettings, stage_params
from strategies.params import number_text
from strategies.phases import THINK_CLOSE, answer_overrides


def shown(value: object) -> str:
    return number_text(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


def brief(value: object) -> str:
    """A value as a person reads it in a list: numbers to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return shown(value)


def stage_values(s: RunSettings, stage: str) -> str:
    """'top_k 40 is' / 'xtc_probability 0.5, xtc_threshold 0.1 are': the run's values of the stage's parameters."""
    names = stage_params(stage)
    return ", ".join(f"{name} {brief(s.value(name))}" for name in names) + (" is" if len(names) == 1 else " are")


def missing_stages(facts: EngineFacts, s: RunSettings, skip: tuple[str, ...] = ()) -> list[str]:
    """One line per stage the run turns on and the engine does not have."""
    return [f"{facts.title} has no {STAGE_WORDS[name]}: the run's {stage_values(s, name)} left out"
            for name in s.on() if name not in facts.stages and name not in skip]


def carried_on(facts: EngineFacts, s: RunSettings) -> list[str]:
    """The stages the run turns on that the engine has, in the run's order."""
    return [name for name in s.on() if name in facts.stages]


def order_gap(facts: EngineFacts, s: RunSettings) -> list[str]:
    """A line when the engine's fixed order puts two of the run's stages the other way round."""
    if facts.order is None:
        return []
    ran = carried_on(facts, s)
    if facts.key == "transformers" and not s.samples:  # greedy search: only the penalties act, then the argmax
        ran = [n for n in ran if n in ("penalty", "no_repeat_ngram", "temperature")]
    fixed = sorted(ran, key=facts.order.index)
    if ran == fixed:
        return []
    return [f"{facts.title} applies its stages in a fixed order, {' → '.join(STAGE_WORDS[n] for n in fixed)}; "
            f"this run applied {' → '.join(STAGE_WORDS[n] for n in ran)} (the same values give another "
            f"distribution)"]


def limit_gaps(facts: EngineFacts, s: RunSettings) -> list[str]:
    """A line per value outside the range the engine takes (the export clamps it)."""
    out = []
    for name, (low, high) in facts.limits.items():
        value = s.value(name)
        if not low <= value <= high:
            out.append(f"{facts.title} takes {name} in [{number_text(low)}, {number_text(high)}]; the run's "
                       f"{number_text(value)} is written as {number_text(min(max(value, low), high))}")
    return out


def seed_gap(facts: EngineFacts, s: RunSettings) -> list[str]:
    if not s.samples or s.seed is None:
        return []
    owner = facts.title + ("'" if facts.title.endswith("s") else "'s")
    return [f"the seed {s.seed} fixes {owner} own random draws, not the playground's: the same settings "
            "give the same distributions, other samples"]


def common_gaps(facts: EngineFacts, s: RunSettings, skip: tuple[str, ...] = ()) -> list[str]:
    """The lines every engine shares: missing stages, a fixed order, out-of-range values, the seed."""
    return [*missing_stages(facts, s, skip), *order_gap(facts, s), *limit_gaps(facts, s), *seed_gap(facts, s)]


def grammar_gap(title: str, s: RunSettings, takes: tuple[str, ...], where: str) -> list[str]:
    """A line when the run's grammar is of a kind the engine (or this export of it) does not take."""
    if s.grammar is None or s.grammar["kind"] in takes:
        return []
    return [f"{title} takes no {s.grammar['kind']} grammar{where}: the run's grammar is left out"]


def budget(s: RunSettings) -> int | None:
    """The run's thinking budget, None when it has none (-1)."""
    return s.params.thinking_budget if s.params.thinking_budget >= 0 else None


def custom_marker(s: RunSettings) -> str | None:
    """The run's phase marker where it is not the usual close (empty: the tokenizer's own </think>)."""
    marker = s.params.phase_marker
    return marker if marker and marker != THINK_CLOSE else None


def budget_words(s: RunSettings) -> str:
    """"thinking_budget 64 and budget message 'Time is up.' are" (the message only where the run has one)."""
    if s.params.budget_message:
        return f"thinking_budget {s.params.thinking_budget} and budget message {s.params.budget_message!r} are"
    return f"thinking_budget {s.params.thinking_budget} is"


def answer_gap(facts: EngineFacts, s: RunSettings) -> list[str]:
    """A line when the run's answer has its own chain (answer_params): no engine runs a second chain."""
    overrides = answer_overrides(s.params)
    if not overrides or facts.phases is None:
        return []
    values = ", ".join(f"{name} {brief(value)}" for name, value in overrides.items())
    return [f"{facts.title} runs one sampler chain for the thinking and the answer: the answer's own values "
            f"({values}) are left out, the whole output is written with the thinking's chain (a second chain "
            f"after the thinking: {facts.phases.second_chain})"]
