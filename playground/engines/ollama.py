"""An Ollama Modelfile's PARAMETER lines from a run, and a Modelfile read back. Ollama passes them to
llama-server, whose default order applies; facts.py's "ollama" row holds the sources."""
from __future__ import annotations

import json
from typing import Any

from playground.engines.facts import ENGINES
from playground.engines.gaps import answer_gap, budget, budget_words, common_gaps, grammar_gap
from playground.engines.llamacpp import window
from playground.engines.settings import RunSettings, number, sampler_params, whole
from playground.errors import InvalidRequest
from strategies.params import number_text

FACTS = ENGINES["ollama"]
NAMES = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "typical_p": "typical_p",
         "repeat_penalty": "repetition_penalty", "repeat_last_n": "penalty_last_n",
         "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty"}
NOT_SAMPLING = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread", "num_keep",
                "draft_num_predict"}
INSTRUCTIONS = {"FROM", "TEMPLATE", "SYSTEM", "ADAPTER", "LICENSE", "MESSAGE", "REQUIRES"}


def parameters(s: RunSettings) -> list[tuple[str, Any]]:
    """(name, value) of each PARAMETER line, every sampler value written so a library model's own
    PARAMETERs do not apply in its place."""
    p = s.params
    out: list[tuple[str, Any]] = [("temperature", p.temperature), ("top_k", p.top_k), ("top_p", p.top_p),
                                  ("min_p", p.min_p)]
    if "typical_p" in s.on():
        out.append(("typical_p", p.typical_p))
    out += [("repeat_penalty", p.repetition_penalty), ("repeat_last_n", window(s, -1)),
            ("presence_penalty", p.presence_penalty), ("frequency_penalty", p.frequency_penalty)]
    if s.seed is not None:
        out.append(("seed", s.seed))
    if s.max_new_tokens is not None:
        out.append(("num_predict", s.max_new_tokens))
    out += [("stop", stop) for stop in s.stop]
    return out


def text(s: RunSettings) -> str:
    lines = ["# FROM <your model>"]
    for name, value in parameters(s):
        shown_value = json.dumps(value, ensure_ascii=False) if name == "stop" else number_text(value)
        lines.append(f"PARAMETER {name} {shown_value}")
    return "\n".join(lines) + "\n"


def gaps(s: RunSettings) -> list[str]:
    on, out = s.on(), common_gaps(FACTS, s)
    if "penalty" in on and "presence_frequency" in on and s.params.penalty_last_n != -1:
        out.append(f"Ollama's repetition penalty counts the same last {s.params.penalty_last_n} tokens as presence "
                   "and frequency (repeat_last_n); here it read the whole text")
    if "presence_frequency" in on:
        out.append("Ollama's llama-server puts the prompt's tokens in the penalties' window; here presence and "
                   "frequency count only the run's own tokens")
    if s.grammar is not None:
        out += grammar_gap("an Ollama Modelfile", s, (), " (a request's format takes a JSON schema)")
    return out + phase_gaps(s)


def phase_gaps(s: RunSettings) -> list[str]:
    """Ollama has no thinking budget: a request's "think" turns the thinking on or off, or sets a level."""
    out = []
    if budget(s) == 0:
        out.append(f"an Ollama Modelfile has no thinking setting: the run's {budget_words(s)} left out; no thinking "
                   "is a request's \"think\": false there, which asks the model's template for none")
    elif budget(s) is not None:
        out.append(f"Ollama has no thinking token budget (a request's \"think\" takes true, false or a level: "
                   f"\"low\", \"medium\", \"high\", \"max\"): the run's {budget_words(s)} left out")
    return out + answer_gap(FACTS, s)


def fields(s: RunSettings) -> dict[str, Any]:
    return {name: value for name, value in parameters(s) if name != "stop"} | {"stop": list(s.stop)}


def read(modelfile: str) -> tuple[RunSettings, list[str]]:
    """A Modelfile -> the run its PARAMETERs make over Ollama's defaults, and what could not be carried."""
    values: dict[str, Any] = dict(FACTS.defaults)
    left: list[str] = []
    seed = limit = None
    stop: list[str] = []
    quoted = False
    for raw in modelfile.splitlines():
        line = raw.strip()
        if quoted or line.count('"""') % 2:
            quoted = quoted != (line.count('"""') % 2 == 1)
            continue
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() in INSTRUCTIONS:
            continue
        if word.upper() != "PARAMETER":
            raise InvalidRequest(f"a Modelfile line must start with an instruction (PARAMETER, FROM, ...), got "
                                 f"{line[:80]!r}")
        name, _, value = rest.strip().partition(" ")
        value = value.strip()
        if name == "stop":
            stop.append(unquoted(value))
        elif name == "seed":
            seed = whole("seed", value)
            seed = None if seed < 0 else seed
        elif name == "num_predict":
            limit = whole("num_predict", value)
            limit = None if limit < 0 else limit
        elif name in NAMES:
            values[NAMES[name]] = value
        elif name not in NOT_SAMPLING:
            left.append(f"PARAMETER {name} {value}: not a setting the playground has")
    if number("top_k", values["top_k"]) < 0:
        values["top_k"] = 0
    return RunSettings(sampler_params(values), "sampling", seed, limit, tuple(stop)), left


def unquoted(value: str) -> str:
    """A PARAMETER's value as written: a quoted string with its escapes read, else the text itself."""
    if value.startswith('"'):
        try:
            out = json.loads(value)
        except json.JSONDecodeError:
            return value.strip('"')
        return out if isinstance(out, str) else value
    return value
