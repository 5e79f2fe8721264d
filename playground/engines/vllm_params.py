"""vLLM: ``SamplingParams`` (Python) and the OpenAI-compatible JSON body with vLLM's extra fields, from a run,
and either read back. The fixed order, the missing stages and the window are facts.py's "vllm" row; a
thinking budget is ``thinking_token_budget``, which vLLM takes only when started with a reasoning parser.
"""
from __future__ import annotations

import json
from typing import Any

from playground.engines.facts import ENGINES
from playground.engines.gaps import answer_gap, budget, common_gaps, custom_marker, grammar_gap
from playground.engines.pycall import Raw, call_kwargs, python_call
from playground.engines.settings import RunSettings, budget_of, number, sampler_params
from playground.errors import InvalidRequest
from strategies.sampling.grammar import choices_of

FACTS = ENGINES["vllm"]
STRUCTURED = {"json": "json", "regex": "regex", "choices": "choice", "lark": "grammar"}
NUMBERS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")


def kwargs(s: RunSettings) -> dict[str, Any]:
    """SamplingParams' keyword arguments (every sampler value written: the server would otherwise take the
    model's generation_config.json); ``structured_outputs`` as a plain dict."""
    p = s.params
    out: dict[str, Any] = {name: getattr(p, name) for name in NUMBERS}
    if s.seed is not None:
        out["seed"] = s.seed
    if s.max_new_tokens is not None:
        out["max_tokens"] = s.max_new_tokens
    if s.stop:
        out["stop"] = list(s.stop)
    if s.grammar is not None:
        kind, text = s.grammar["kind"], s.grammar["text"]
        out["structured_outputs"] = {STRUCTURED[kind]: choices_of(text) if kind == "choices" else text}
    if budget(s) is not None:
        out["thinking_token_budget"] = budget(s)
    return out


def server_note(s: RunSettings) -> str:
    """What a budget needs of the vLLM server (a comment; vLLM refuses thinking_token_budget without it)."""
    if budget(s) is None:
        return ""
    marker = custom_marker(s)
    config = ("--reasoning-config '{\"reasoning_start_str\": \"<the model's opening tag>\", \"reasoning_end_str\": "
              f"{json.dumps(marker, ensure_ascii=False)}}}'" if marker is not None else
              "--reasoning-parser <the model's parser, e.g. qwen3>")
    return f"# thinking_token_budget needs vLLM started with {config}\n"


def python_text(s: RunSettings) -> str:
    args: dict[str, Any] = dict(kwargs(s))
    head = "from vllm import SamplingParams\n"
    if "structured_outputs" in args:
        head += "from vllm.sampling_params import StructuredOutputsParams\n"
        inner = args["structured_outputs"]
        args["structured_outputs"] = Raw("StructuredOutputsParams(" + ", ".join(f"{k}={v!r}" for k, v in inner.items())
                                         + ")")
    return head + "\n" + server_note(s) + "sampling_params = " + python_call("SamplingParams", args) + "\n"


def body(s: RunSettings) -> dict[str, Any]:
    """The sampling fields of a /v1/completions or /v1/chat/completions body (add model and messages)."""
    out = kwargs(s)
    grammar = out.get("structured_outputs")
    if grammar and "json" in grammar:
        out["structured_outputs"] = {"json": json.loads(grammar["json"])}
    return out


def json_text(s: RunSettings) -> str:
    return json.dumps(body(s), indent=2, ensure_ascii=False) + "\n"


def gaps(s: RunSettings) -> list[str]:
    out = common_gaps(FACTS, s)
    if "presence_frequency" in s.on() and s.params.penalty_last_n != -1:
        out.append(f"vLLM counts presence and frequency over every generated token; the run counted the last "
                   f"{s.params.penalty_last_n} only")
    if s.max_new_tokens is None:
        out.append("without max_tokens vLLM's SamplingParams stops at 16 tokens")
    return out + grammar_gap("vLLM", s, tuple(STRUCTURED), "") + phase_gaps(s)


def phase_gaps(s: RunSettings) -> list[str]:
    """A budget's message (vLLM forces the close alone), a marker of the run's own, the answer's chain."""
    out, marker = [], custom_marker(s)
    if budget(s) is not None and s.params.budget_message:
        out.append(f"vLLM's thinking_token_budget forces the end of the thinking alone: the run's budget message "
                   f"{s.params.budget_message!r} is left out")
    if budget(s) is not None and marker is not None:
        out.append(f"vLLM finds the thinking by its reasoning parser's tags, not by a marker in the request: the "
                   f"run's marker {marker!r} goes to the server as --reasoning-config's reasoning_end_str, with the "
                   "model's opening tag as reasoning_start_str (the playground has none to give)")
    return out + answer_gap(FACTS, s)


def fields(s: RunSettings) -> dict[str, Any]:
    return body(s)


def from_kwargs(args: dict[str, Any], left: list[str]) -> RunSettings:
    """SamplingParams' keyword arguments (or a JSON body's fields) -> the run; what is not carried into ``left``."""
    values: dict[str, Any] = {k: v for k, v in FACTS.defaults.items()}
    seed = limit = None
    stop: tuple[str, ...] = ()
    grammar = None
    for key, value in args.items():
        if key in NUMBERS and value is not None:
            values[key] = 0 if key == "top_k" and number("top_k", value) < 0 else value
        elif key == "seed":
            seed = value
        elif key in ("max_tokens", "max_completion_tokens", "max_new_tokens"):
            limit = value
        elif key == "thinking_token_budget":
            if value is not None:
                values["thinking_budget"] = budget_of(key, value, left)
        elif key == "stop":
            stop = (value,) if isinstance(value, str) else tuple(value or ())
        elif key in ("structured_outputs", "response_format") or key.startswith("guided_"):
            grammar = grammar_of(key, value, left) or grammar
        elif key in ("model", "messages", "prompt", "stream", "n", "logprobs", "top_logprobs", "user", "echo"):
            continue
        else:
            left.append(f"{key} {json.dumps(value)[:60]}: not a setting the playground has")
    return RunSettings(sampler_params(values), "sampling", seed, limit, stop, grammar)


def grammar_of(key: str, value: Any, left: list[str]) -> dict[str, str] | None:
    """The playground grammar of vLLM's structured_outputs, its older guided_* fields or an OpenAI
    response_format."""
    if key.startswith("guided_"):
        value = {key[len("guided_"):]: value}
    if key == "response_format":
        if isinstance(value, dict) and value.get("type") == "json_schema":
            schema = (value.get("json_schema") or {}).get("schema")
            return {"kind": "json", "text": json.dumps(schema)}
        left.append(f"response_format {json.dumps(value)[:60]}: only a json_schema carries")
        return None
    if not isinstance(value, dict):
        raise InvalidRequest(f"structured_outputs must be an object, got {value!r:.100}")
    for kind, field in STRUCTURED.items():
        if field in value:
            text = value[field]
            if kind == "choices":
                text = json.dumps(list(text), ensure_ascii=False)
            elif kind == "json" and not isinstance(text, str):
                text = json.dumps(text)
            return {"kind": kind, "text": text}
    left.append(f"structured_outputs {json.dumps(value)[:60]}: not a grammar kind the playground has")
    return None


def read_python(text: str) -> tuple[RunSettings, list[str]]:
    args = call_kwargs(text, "SamplingParams")
    if args is None:
        raise InvalidRequest("no SamplingParams(...) call found in the Python snippet")
    left: list[str] = []
    return from_kwargs(args, left), left


def read_json(data: dict[str, Any]) -> tuple[RunSettings, list[str]]:
    left: list[str] = []
    return from_kwargs(data, left), left
