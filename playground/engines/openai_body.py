"""An OpenAI-style chat completions body from a run (the fields the OpenAI API defines; vLLM's extras are in
vllm_params.py), and read back. The API has temperature, top_p and the presence and frequency penalties."""
from __future__ import annotations

import json
from typing import Any

from playground.engines.facts import ENGINES
from playground.engines.gaps import answer_gap, budget, budget_words, common_gaps, grammar_gap
from playground.engines.settings import RunSettings
from playground.engines.vllm_params import from_kwargs

FACTS = ENGINES["openai"]
MAX_STOP = 4  # the API takes up to 4 stop sequences


def body(s: RunSettings) -> dict[str, Any]:
    """The sampling fields of a body (add model and messages); values clamped to the API's ranges."""
    p = s.params
    low, high = FACTS.limits["temperature"]
    out: dict[str, Any] = {"temperature": min(max(p.temperature, low), high), "top_p": p.top_p,
                           "presence_penalty": p.presence_penalty, "frequency_penalty": p.frequency_penalty}
    if s.seed is not None:
        out["seed"] = s.seed
    if s.max_new_tokens is not None:
        out["max_tokens"] = s.max_new_tokens
    if s.stop:
        out["stop"] = list(s.stop[:MAX_STOP])
    if s.grammar is not None and s.grammar["kind"] == "json":
        out["response_format"] = {"type": "json_schema",
                                  "json_schema": {"name": "output", "schema": json.loads(s.grammar["text"])}}
    return out


def text(s: RunSettings) -> str:
    return json.dumps(body(s), indent=2, ensure_ascii=False) + "\n"


def gaps(s: RunSettings) -> list[str]:
    out = common_gaps(FACTS, s)
    if "temperature" in s.on() and "top_p" in s.on():
        out.append("the OpenAI API does not say whether top_p acts before or after temperature")
    if "presence_frequency" in s.on() and s.params.penalty_last_n != -1:
        out.append(f"the OpenAI API counts presence and frequency over the whole output; the run counted the last "
                   f"{s.params.penalty_last_n} tokens only")
    if len(s.stop) > MAX_STOP:
        out.append(f"the OpenAI API takes at most {MAX_STOP} stop strings: {list(s.stop[MAX_STOP:])!r} left out")
    out += grammar_gap("the OpenAI API", s, ("json",), " (response_format takes a JSON schema)")
    if budget(s) is not None:
        out.append(f"the OpenAI API has no thinking token budget: reasoning_effort is a level, not a count of "
                   f"tokens, and max_completion_tokens caps the thinking and the answer together; the run's "
                   f"{budget_words(s)} left out")
    return out + answer_gap(FACTS, s)


def fields(s: RunSettings) -> dict[str, Any]:
    return body(s)


def read(data: dict[str, Any]) -> tuple[RunSettings, list[str]]:
    left: list[str] = []
    return from_kwargs(data, left), left
