"""The export formats, one row each: the engine whose facts apply, the text, what it cannot express, the
values the engine is told (for comparing two runs as the engine sees them) and the reader that takes the
text back. ``export`` and ``export_trace`` are what the CLI and the trace's export call.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from playground.engines import llamacpp, llamacpp_read, ollama, openai_body, transformers_config, vllm_params
from playground.engines.facts import ENGINES
from playground.engines.settings import RunSettings, json_object, settings_of_trace
from playground.errors import InvalidRequest

Reader = Callable[[str], tuple[RunSettings, list[str]]]


def json_reader(read: Callable[[Any], tuple[RunSettings, list[str]]]) -> Reader:
    def from_text(text: str) -> tuple[RunSettings, list[str]]:
        return read(json_object(text))
    return from_text


@dataclass(frozen=True)
class Format:
    name: str
    engine: str  # its row in facts.ENGINES
    title: str
    text: Callable[[RunSettings], str]
    gaps: Callable[[RunSettings], list[str]]
    fields: Callable[[RunSettings], dict[str, Any]]
    read: Reader


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("llama-server", "llama.cpp", "llama-server flags", llamacpp.server_text, llamacpp.server_gaps,
           llamacpp.fields, llamacpp_read.read),
    Format("llama-cli", "llama.cpp", "llama-cli flags", llamacpp.cli_text, llamacpp.cli_gaps,
           lambda s: llamacpp.fields(s, cli=True), llamacpp_read.read),
    Format("vllm", "vllm", "vLLM SamplingParams (Python)", vllm_params.python_text, vllm_params.gaps,
           vllm_params.fields, vllm_params.read_python),
    Format("vllm-json", "vllm", "vLLM OpenAI-compatible body (JSON, with vLLM's extra fields)", vllm_params.json_text,
           vllm_params.gaps, vllm_params.fields, json_reader(vllm_params.read_json)),
    Format("transformers", "transformers", "transformers GenerationConfig (Python)", transformers_config.text,
           transformers_config.gaps, transformers_config.fields, transformers_config.read_python),
    Format("ollama", "ollama", "Ollama Modelfile PARAMETER lines", ollama.text, ollama.gaps, ollama.fields,
           ollama.read),
    Format("openai", "openai", "OpenAI-style request body (JSON)", openai_body.text, openai_body.gaps,
           openai_body.fields, json_reader(openai_body.read)),
)}


def format_named(name: str) -> Format:
    if name not in FORMATS:
        raise InvalidRequest(f"engine must be one of {', '.join(FORMATS)}, got {name!r}")
    return FORMATS[name]


@dataclass(frozen=True)
class Export:
    """One export: its text, what the engine cannot express of the run, and the engine's version."""

    name: str
    title: str
    text: str
    cannot_express: list[str]
    version: str

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.name, "title": self.title, "text": self.text, "cannot_express": self.cannot_express,
                "version": self.version}


def export(name: str, settings: RunSettings) -> Export:
    f = format_named(name)
    return Export(f.name, f.title, f.text(settings), f.gaps(settings), ENGINES[f.engine].version)


def export_all(settings: RunSettings) -> dict[str, Export]:
    return {name: export(name, settings) for name in FORMATS}


def export_trace(trace: Mapping[str, Any]) -> dict[str, str]:
    """Per format, the text of a trace JSON's run as that engine's config, what the engine cannot express
    listed under it as comments (or, for JSON, in a ``cannot_express`` list beside the body)."""
    settings = settings_of_trace(trace)
    return {name: with_gaps(e) for name, e in export_all(settings).items()}


def with_gaps(e: Export) -> str:
    """The export's text with what the engine cannot express after it, as the format writes a comment."""
    if not e.cannot_express:
        return e.text
    if e.text.lstrip().startswith("{"):
        return json.dumps({"body": json.loads(e.text), "cannot_express": e.cannot_express}, indent=2,
                          ensure_ascii=False) + "\n"
    return e.text + "".join(f"# cannot express: {line}\n" for line in e.cannot_express)
