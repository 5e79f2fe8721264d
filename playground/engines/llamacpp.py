"""llama-server and llama-cli flags from a run (llamacpp_read.py reads a command line back).

Every flag a GGUF's ``general.sampling.*`` keys or llama.cpp's defaults would otherwise fill is written
(temperature, top-k, top-p, min-p, XTC's probability, the penalties and their window, mirostat and
``--samplers``), so what runs is what the playground ran, not the model's or the engine's choice.
``--samplers`` lists llama.cpp's stages in the run's order. A thinking budget goes out as
``--reasoning-budget`` (and its message as ``--reasoning-budget-message``). facts.py holds the sources.
"""
from __future__ import annotations

import json
import shlex
from typing import Any

from playground.engines.facts import ENGINES, STAGE_WORDS
from playground.engines.gaps import answer_gap, budget, common_gaps, custom_marker, grammar_gap, shown
from playground.engines.settings import RunSettings
from playground.models.lineup import MAX_NEW_TOKENS, MAX_PROMPT_TOKENS
from strategies.params import number_text
from strategies.sampling.grammar import choices_of
from strategies.sampling.repeats import parse_breakers

FACTS = ENGINES["llama.cpp"]
TRUNCATIONS = ("dry", "top_nsigma", "top_k", "typical_p", "top_p", "min_p", "xtc", "dynamic_temperature")


def uses_dynatemp(s: RunSettings) -> bool:
    """Dynamic temperature goes out as llama.cpp's one temperature stage, which needs temperature 1 here."""
    return "dynamic_temperature" in s.on() and s.params.temperature == 1.0


def samplers(s: RunSettings) -> list[str]:
    """llama.cpp's stage names in the run's order (penalties once, at the first of its two stages)."""
    on, out = s.on(), []
    for name in s.params.order.split(","):
        if name == "dynamic_temperature" and not uses_dynatemp(s) or name == "temperature" and uses_dynatemp(s):
            continue
        if name in ("mirostat",) or name == "adaptive_p" and name not in on:
            continue
        llama = "temperature" if name == "dynamic_temperature" else FACTS.stages.get(name)
        if llama is not None and llama not in out:
            out.append(llama)
    return out


# The longest text a playground run holds (its prompt and new tokens at their limits): a window this long is
# the whole text, written where -1 would be (llama.cpp 0c1e570 refuses it; facts.LLAMA_ORDER_NOTE), and read
# back as -1.
WHOLE_TEXT = MAX_PROMPT_TOKENS + MAX_NEW_TOKENS


def window(s: RunSettings, whole: int = WHOLE_TEXT) -> int:
    """--repeat-last-n: the presence and frequency window when they are on and shorter than any text, else
    ``whole`` (the repetition penalty here reads the whole text)."""
    n = s.params.penalty_last_n
    return n if "presence_frequency" in s.on() and 0 <= n < WHOLE_TEXT else whole


def temperature_flags(s: RunSettings) -> list[tuple[str, Any]]:
    p = s.params
    if uses_dynatemp(s):
        return [("--temp", (p.dynatemp_min + p.dynatemp_max) / 2),
                ("--dynatemp-range", (p.dynatemp_max - p.dynatemp_min) / 2), ("--dynatemp-exp", p.dynatemp_exponent)]
    return [("--temp", p.temperature)]


def flags(s: RunSettings, cli: bool = False) -> list[tuple[str, Any]]:
    """(flag, value) pairs of the export, value None for a flag that takes none; in the order written."""
    p, on = s.params, s.on()
    out: list[tuple[str, Any]] = [*temperature_flags(s), ("--top-k", p.top_k), ("--top-p", p.top_p),
                                  ("--min-p", p.min_p), ("--repeat-penalty", p.repetition_penalty),
                                  ("--presence-penalty", p.presence_penalty),
                                  ("--frequency-penalty", p.frequency_penalty), ("--repeat-last-n", window(s)),
                                  ("--xtc-probability", p.xtc_probability)]
    if "xtc" in on:
        out.append(("--xtc-threshold", p.xtc_threshold))
    if "typical_p" in on:
        out.append(("--typical", p.typical_p))
    if "top_nsigma" in on:
        out.append(("--top-nsigma", p.top_nsigma))
    if "dry" in on:
        out += [("--dry-multiplier", p.dry_multiplier), ("--dry-base", p.dry_base),
                ("--dry-allowed-length", p.dry_allowed_length), ("--dry-penalty-last-n", WHOLE_TEXT)]
        out += [("--dry-sequence-breaker", b) for b in parse_breakers(p.dry_sequence_breakers)]
    out.append(("--mirostat", 2 if "mirostat" in on else 0))
    if "mirostat" in on:
        out += [("--mirostat-ent", p.mirostat_tau), ("--mirostat-lr", p.mirostat_eta)]
    if "adaptive_p" in on:
        out += [("--adaptive-target", p.adaptive_p_target), ("--adaptive-decay", p.adaptive_p_decay)]
    out.append(("--samplers", ";".join(samplers(s))))
    if s.seed is not None:
        out.append(("--seed", s.seed))
    if s.max_new_tokens is not None:
        out.append(("--n-predict", s.max_new_tokens))
    out += grammar_flags(s)
    if cli:
        out += [("--reverse-prompt", stop) for stop in s.stop]
    return out + reasoning_flags(s)


def reasoning_flags(s: RunSettings) -> list[tuple[str, Any]]:
    """--reasoning-budget N (0: no thinking) and the message forced before the close, where the run has a budget."""
    n = budget(s)
    if n is None:
        return []
    out: list[tuple[str, Any]] = [("--reasoning-budget", n)]
    if s.params.budget_message:
        out.append(("--reasoning-budget-message", s.params.budget_message))
    return out


def grammar_flags(s: RunSettings) -> list[tuple[str, Any]]:
    if s.grammar is None:
        return []
    if s.grammar["kind"] == "json":
        return [("--json-schema", s.grammar["text"])]
    if s.grammar["kind"] == "choices":
        return [("--grammar", choices_gbnf(choices_of(s.grammar["text"])))]
    return []


def choices_gbnf(choices: list[str]) -> str:
    """``root ::= "a" | "b"``: GBNF literals in JSON's string escapes, which GBNF reads the same way."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def gbnf_choices(text: str) -> list[str] | None:
    """The choices of a grammar ``choices_gbnf`` wrote, or None for any other grammar."""
    head = "root ::= "
    if not text.startswith(head):
        return None
    try:
        items = json.loads("[" + text[len(head):].replace('" | "', '", "') + "]")
    except json.JSONDecodeError:
        return None
    ok = isinstance(items, list) and items and all(isinstance(i, str) for i in items)
    return items if ok and choices_gbnf(items) == text else None


def render(s: RunSettings, program: str) -> str:
    """The command line, one flag a line."""
    pairs = flags(s, cli=program == "llama-cli")
    lines = [f"{program} -m MODEL.gguf"] + [flag if value is None else f"{flag} {shlex.quote(shown_value(value))}"
                                            for flag, value in pairs]
    return " \\\n  ".join(lines) + "\n"


def shown_value(value: Any) -> str:
    return number_text(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def server_text(s: RunSettings) -> str:
    return render(s, "llama-server")


def cli_text(s: RunSettings) -> str:
    return render(s, "llama-cli")


def gaps(s: RunSettings, cli: bool = False) -> list[str]:
    """What llama.cpp cannot express of ``s``, beyond the common lines."""
    on, p, out = s.on(), s.params, common_gaps(FACTS, s)
    if "dynamic_temperature" in on and not uses_dynatemp(s):
        out.append(f"llama.cpp has one temperature stage: the run's dynamic temperature ({shown(p.dynatemp_min)} to "
                   f"{shown(p.dynatemp_max)}) on top of temperature {shown(p.temperature)} is left out")
    if "mirostat" in on:
        skipped = [n for n in on if n in TRUNCATIONS or n in ("penalty", "presence_frequency", "adaptive_p")]
        if skipped:
            out.append(f"with mirostat llama.cpp runs only temperature before it: the run's "
                       f"{', '.join(STAGE_WORDS[n] for n in skipped)} do not act there")
    pen = [n for n in on if n in ("penalty", "presence_frequency")]
    if len(pen) == 2:
        between = on[on.index(pen[0]) + 1:on.index(pen[1])]
        if pen[0] != "penalty" or between:
            out.append("llama.cpp applies the repetition penalty and then presence and frequency as one stage; this "
                       "run applied them " + ("in the other order" if pen[0] != "penalty" else
                                              f"with {', '.join(between)} between them"))
        if window(s) != WHOLE_TEXT:
            out.append(f"llama.cpp's repetition penalty counts the same last {p.penalty_last_n} tokens as presence and "
                       "frequency (--repeat-last-n); here it read the whole text")
    if "presence_frequency" in on:
        out.append(f"{'llama-cli' if cli else 'llama-server'} puts the prompt's tokens in the penalties' window "
                   "before the first draw; here presence and frequency count only the run's own tokens")
    out += grammar_gap("llama.cpp", s, ("json", "choices"), " as GBNF or a JSON schema")
    if s.stop and not cli:
        out.append(f"llama-server takes stop strings per request ('stop' in the JSON body), not as flags: "
                   f"{list(s.stop)!r} is left out of these flags")
    return out + phase_gaps(s)


def phase_gaps(s: RunSettings) -> list[str]:
    """The run's phases that the flags cannot carry: a marker of its own, the answer's chain."""
    out, marker = [], custom_marker(s)
    if marker is not None and budget(s) is not None:
        out.append(f"llama.cpp ends the thinking at the end tag of the model's chat template, not at a marker "
                   f"you name: the run's marker {marker!r} cannot be set, and --reasoning-budget forces the "
                   "template's tag")
    return out + answer_gap(FACTS, s)


def server_gaps(s: RunSettings) -> list[str]:
    return gaps(s)


def cli_gaps(s: RunSettings) -> list[str]:
    return gaps(s, cli=True)


def fields(s: RunSettings, cli: bool = False) -> dict[str, Any]:
    """What llama.cpp is told, as a dict (for comparing two settings the way llama.cpp sees them)."""
    return {flag: value if not isinstance(value, float) else round(value, 12) for flag, value in flags(s, cli)
            if flag != "--dry-sequence-breaker"} | {"breakers": [v for f, v in flags(s, cli)
                                                                if f == "--dry-sequence-breaker"]}
