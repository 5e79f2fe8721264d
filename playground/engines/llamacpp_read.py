"""A llama-server or llama-cli command line read back into a run: the flags over llama.cpp's defaults,
``--samplers`` as the order (a stage it does not list is off, as llama.cpp skips it), ``--reasoning-budget``
and ``--reasoning-budget-message`` as the thinking budget and its message, and the list of what could not be
carried."""
from __future__ import annotations

import json
import shlex
from typing import Any

from playground.engines.gaps import shown
from playground.engines.llamacpp import FACTS, WHOLE_TEXT, gbnf_choices
from playground.engines.settings import RunSettings, budget_of, message_of, number, sampler_params, whole
from playground.errors import InvalidRequest
from strategies.sampling.samplers import expand_order

SAMPLER_NAMES = {"penalties": ("penalty", "presence_frequency"), "dry": ("dry",), "top_n_sigma": ("top_nsigma",),
                 "top_k": ("top_k",), "typ_p": ("typical_p",), "top_p": ("top_p",), "min_p": ("min_p",),
                 "xtc": ("xtc",), "temperature": ("temperature",), "adaptive_p": ("adaptive_p",)}
ALIASES = {"typical": "typ_p", "typical_p": "typ_p", "typ": "typ_p", "nucleus": "top_p", "temp": "temperature",
           "top_nsigma": "top_n_sigma", "penalty": "penalties"}
# flag -> the playground parameter it sets (the simple ones: one number each)
NUMBER_FLAGS = {"--temp": "temperature", "--top-k": "top_k", "--top-p": "top_p", "--min-p": "min_p",
                "--typical": "typical_p", "--repeat-penalty": "repetition_penalty",
                "--presence-penalty": "presence_penalty", "--frequency-penalty": "frequency_penalty",
                "--repeat-last-n": "penalty_last_n", "--dry-multiplier": "dry_multiplier", "--dry-base": "dry_base",
                "--dry-allowed-length": "dry_allowed_length", "--xtc-probability": "xtc_probability",
                "--xtc-threshold": "xtc_threshold", "--top-nsigma": "top_nsigma", "--mirostat-ent": "mirostat_tau",
                "--mirostat-lr": "mirostat_eta", "--adaptive-target": "adaptive_p_target",
                "--adaptive-decay": "adaptive_p_decay"}
SHORT = {"-s": "--seed", "-n": "--n-predict", "--predict": "--n-predict", "-r": "--reverse-prompt",
         "--temperature": "--temp", "--typical-p": "--typical", "-j": "--json-schema"}
# flags whose value is text, taken as the next word even where it starts with "-" (as llama.cpp's parser does)
TEXT_FLAGS = {"--reasoning-budget-message", "--reverse-prompt", "--dry-sequence-breaker", "--grammar", "--json-schema"}
OTHER_VALUED = {"-m", "--model", "--port", "--host", "-c", "--ctx-size", "-ngl", "--n-gpu-layers", "-t", "--threads",
                "-p", "--prompt", "-hf", "--hf-repo", "-a", "--alias", "-b", "--batch-size", "-np", "--parallel"}



def tokens_of(text: str) -> list[str]:
    """The words of a command line, its line continuations and comments dropped."""
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as e:
        raise InvalidRequest(f"the llama.cpp command line does not parse: {e}") from None


def pairs_of(words: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """(flag, value) pairs of a command line, and the words that are neither (the program's name)."""
    pairs: list[tuple[str, str | None]] = []
    loose: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and not _is_number(word):
            flag, eq, value = word.partition("=")
            flag = SHORT.get(flag, flag)
            if not eq and i + 1 < len(words) and (not words[i + 1].startswith("-") or _is_number(words[i + 1])
                                                  or flag in TEXT_FLAGS):
                value, i = words[i + 1], i + 1
            pairs.append((flag, value if (eq or value) else None))
        else:
            loose.append(word)
        i += 1
    return pairs, loose


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def sampler_order(text: str, left: list[str], where: str = "--samplers") -> list[str]:
    """llama.cpp's sampler list ('penalties;top_k;...', from ``where``) -> playground stage names in that order;
    unknown names into ``left``."""
    out: list[str] = []
    for raw in (w.strip() for w in text.replace(",", ";").split(";")):
        name = ALIASES.get(raw.replace("-", "_"), raw.replace("-", "_"))
        if name not in SAMPLER_NAMES:
            if raw:
                left.append(f"{where} names {raw!r}, which the playground has no stage for")
            continue
        out += [n for n in SAMPLER_NAMES[name] if n not in out]
    return out


def read(text: str) -> tuple[RunSettings, list[str]]:
    """A llama-server or llama-cli command line -> the run it makes (llama.cpp's defaults for the flags not
    given) and what could not be carried."""
    pairs, _ = pairs_of(tokens_of(text))
    values: dict[str, Any] = {k: v for k, v in FACTS.defaults.items() if k != "order"}
    left: list[str] = []
    order: list[str] | None = None
    seed: int | None = None
    limit: int | None = None
    stop: list[str] = []
    grammar: dict[str, str] | None = None
    breakers: list[str] = []
    mirostat, dyn_range, dyn_exp = 0, 0.0, 1.0
    for flag, value in pairs:
        if flag in NUMBER_FLAGS and value is not None:
            values[NUMBER_FLAGS[flag]] = value
        elif flag == "--samplers" and value is not None:
            order = sampler_order(value, left)
        elif flag == "--seed" and value is not None:
            seed = whole("--seed", value)
            seed = None if seed < 0 or seed == 0xFFFFFFFF else seed
        elif flag == "--n-predict" and value is not None:
            limit = whole("--n-predict", value)
            limit = None if limit < 0 else limit
        elif flag == "--reverse-prompt" and value is not None:
            stop.append(value)
        elif flag == "--json-schema" and value is not None:
            grammar = {"kind": "json", "text": value}
        elif flag == "--grammar" and value is not None:
            found = gbnf_choices(value)
            if found is None:
                left.append("--grammar: a GBNF grammar (the playground takes a JSON schema, a regex, choices or Lark)")
            else:
                grammar = {"kind": "choices", "text": json.dumps(found, ensure_ascii=False)}
        elif flag == "--dry-sequence-breaker" and value is not None:
            breakers.append(value)
        elif flag == "--reasoning-budget" and value is not None:
            values["thinking_budget"] = budget_of(flag, value, left)
        elif flag == "--reasoning-budget-message" and value is not None:
            values["budget_message"] = message_of(flag, value, left)
        elif flag == "--mirostat" and value is not None:
            mirostat = whole("--mirostat", value, 0, 2)
        elif flag == "--dynatemp-range" and value is not None:
            dyn_range = number("--dynatemp-range", value)
        elif flag == "--dynatemp-exp" and value is not None:
            dyn_exp = number("--dynatemp-exp", value)
        elif flag == "--dry-penalty-last-n":
            if value is not None and -1 < whole("--dry-penalty-last-n", value) < WHOLE_TEXT:
                left.append(f"--dry-penalty-last-n {value}: DRY here scans the whole text")
        elif flag in ("--sampling-seq", "--sampler-seq"):
            left.append(f"{flag} {value}: the one-letter order; write it as --samplers with names to carry it")
        elif flag in OTHER_VALUED or flag.startswith("--no-") or flag in ("-cnv", "--conversation", "--jinja"):
            continue
        else:
            left.append(f"{flag}{'' if value is None else ' ' + value}: not a setting the playground has")
    return finish(values, order, seed, limit, stop, grammar, breakers, mirostat, dyn_range, dyn_exp, left)


def finish(values: dict[str, Any], order: list[str] | None, seed: int | None, limit: int | None, stop: list[str],
           grammar: dict[str, str] | None, breakers: list[str], mirostat: int, dyn_range: float, dyn_exp: float,
           left: list[str]) -> tuple[RunSettings, list[str]]:
    if whole("--repeat-last-n", values.get("penalty_last_n", -1)) >= WHOLE_TEXT:
        values["penalty_last_n"] = -1  # as long as any text the playground makes: the whole text
    if breakers:
        values["dry_sequence_breakers"] = ", ".join(json.dumps(b, ensure_ascii=False) for b in breakers)
    if mirostat == 1:
        left.append("--mirostat 1: mirostat v1 (the playground has v2)")
    if mirostat != 2:
        values["mirostat_tau"] = 0.0
    elif number("--mirostat-ent", values.get("mirostat_tau", 0)) == 0:
        values["mirostat_tau"] = FACTS.own_defaults["mirostat_tau"]  # llama.cpp's target with mirostat on
    if dyn_range > 0:
        t = number("--temp", values["temperature"])
        low = t - dyn_range
        if low <= 0:
            left.append(f"--dynatemp-range {shown(dyn_range)} around --temp {shown(t)} reaches {shown(low)}; "
                        "the playground's dynamic temperature starts above 0, so it starts at 0.01")
        values.update(temperature=1.0, dynatemp_min=max(low, 0.01), dynatemp_max=t + dyn_range,
                      dynatemp_exponent=dyn_exp)
    if number("--top-nsigma", values.get("top_nsigma", 0)) < 0:
        values["top_nsigma"] = 0.0
    if number("--top-k", values.get("top_k", 0)) < 0:
        values["top_k"] = 0
    if order is not None:
        names = list(order)
        if "temperature" in names and dyn_range > 0:
            names.insert(names.index("temperature"), "dynamic_temperature")
        off = {n: p for n, p in OFF.items() if n not in names and n != "mirostat"}
        for name, param_values in off.items():
            if any(str(values.get(k, v)) != str(FACTS.defaults.get(k, v)) for k, v in param_values.items()):
                left.append(f"{name} is set but not in --samplers, so llama.cpp does not apply it")
            values.update(param_values)
        values["order"] = expand_order(",".join(names))
    else:
        values["order"] = "llama.cpp"
    settings = RunSettings(sampler_params(values), "sampling", seed, limit, tuple(stop), grammar)
    return settings, left


# each llama.cpp stage's playground parameters at their no-op values (a stage left out of --samplers)
OFF: dict[str, dict[str, Any]] = {
       "penalty": {"repetition_penalty": 1.0}, "presence_frequency": {"presence_penalty": 0.0, "frequency_penalty": 0.0},
       "dry": {"dry_multiplier": 0.0}, "top_nsigma": {"top_nsigma": 0.0}, "top_k": {"top_k": 0},
       "typical_p": {"typical_p": 1.0}, "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0},
       "xtc": {"xtc_probability": 0.0}, "temperature": {"temperature": 1.0}, "adaptive_p": {"adaptive_p_target": -1.0}}
