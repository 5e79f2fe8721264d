"""Import: a llama-server or llama-cli command line, a generation_config.json or GenerationConfig snippet, an
Ollama Modelfile, a vLLM SamplingParams snippet, a vLLM or OpenAI request body, a trace JSON or a GGUF's
general.sampling.* keys -> the run those settings make (over that engine's own defaults), with the list of
what could not be carried."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground.engines import llamacpp, llamacpp_read, ollama, openai_body, transformers_config, vllm_params
from playground.engines.model_cards import card_of_gguf
from playground.engines.settings import RunSettings, json_object, sampler_params, settings_of_trace
from playground.errors import InvalidRequest
from strategies.sampling.samplers import expand_order

MAX_IMPORT_CHARS = 200_000
CONFIG_KEYS = {"do_sample", "bos_token_id", "eos_token_id", "transformers_version", "max_length", "typical_p",
               "no_repeat_ngram_size", "epsilon_cutoff", "eta_cutoff", "_from_model_config", "max_new_tokens"}
VLLM_KEYS = {"top_k", "min_p", "repetition_penalty", "structured_outputs", "guided_json", "guided_regex",
             "guided_choice", "guided_grammar", "thinking_token_budget"}


@dataclass(frozen=True)
class Imported:
    """The run an engine config makes, what kind of config it was, and what could not be carried."""

    settings: RunSettings
    kind: str
    not_carried: list[str]


def import_text(text: str) -> Imported:
    """Read ``text`` as whichever config it is (see the module docstring)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("the config to import must not be empty")
    if len(text) > MAX_IMPORT_CHARS:
        raise InvalidRequest(f"the config to import must be at most {MAX_IMPORT_CHARS} characters, got {len(text)}")
    stripped = text.strip()
    if stripped.startswith("{"):
        return import_json(stripped)
    first = stripped.split(None, 1)[0].upper()
    if "SamplingParams(" in stripped:
        return done("vLLM SamplingParams", vllm_params.read_python(stripped))
    if "GenerationConfig(" in stripped:
        return done("transformers GenerationConfig", transformers_config.read_python(stripped))
    if first in ("PARAMETER", "FROM") or first.startswith("#") and "PARAMETER " in stripped:
        return done("Ollama Modelfile", ollama.read(stripped))
    if "llama-" in first.lower() or first.startswith("-") or "--temp" in stripped or "--samplers" in stripped:
        return done("llama.cpp command line", llamacpp_read.read(stripped))
    raise InvalidRequest("the config to import must be a llama-server or llama-cli command line, a "
                         "generation_config.json, an Ollama Modelfile, a vLLM SamplingParams or GenerationConfig "
                         "snippet, or a vLLM/OpenAI request body")


def import_json(text: str) -> Imported:
    data = json_object(text)
    if "strategy" in data and "params" in data:
        return Imported(settings_of_trace(data), "trace", [])
    if data.keys() & CONFIG_KEYS:
        return done("generation_config.json", transformers_config.read_json(data))
    if data.keys() & VLLM_KEYS:
        return done("vLLM request body", vllm_params.read_json(data))
    return done("OpenAI request body", openai_body.read(data))


def done(kind: str, read: tuple[RunSettings, list[str]]) -> Imported:
    return Imported(read[0], kind, read[1])


def import_gguf(path: str | Path) -> Imported:
    """A GGUF's general.sampling.* keys over llama.cpp's defaults."""
    card = card_of_gguf(str(path), path)
    values: dict[str, Any] = {k: v for k, v in llamacpp.FACTS.defaults.items()} | card.values
    if card.order != "llama.cpp":  # a sequence: llama.cpp runs only the samplers it lists
        listed = card.order.split(",")
        for name, off in llamacpp_read.OFF.items():
            if name not in listed:
                values |= off
    values["order"] = expand_order(card.order) if card.order != "llama.cpp" else "llama.cpp"
    return Imported(RunSettings(sampler_params(values), "sampling", None, None), "GGUF general.sampling.*",
                    list(card.left))


def import_file(path: str) -> Imported:
    """``--import FILE``: a GGUF by its keys, any other file by its text."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise InvalidRequest(f"--import must name a file, got {path!r}")
    if file.suffix.lower() == ".gguf":
        return import_gguf(file)
    try:
        return import_text(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InvalidRequest(f"--import {path}: not a text file (nor a .gguf)") from None
