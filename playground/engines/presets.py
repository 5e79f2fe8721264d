"""Value presets: each sets the chain's values and order and says, in one sentence, what it set.

- ``model card``: the model's published recommendation (model_cards.py), over everything off;
- ``neutral``: everything off, temperature 1: the model's own distribution;
- ``universal``: min-p 0.1 and temperature 1, temperature last (after min-p), the shape of SillyTavern's
  Universal presets (PR #1417, which "assumes temp last, or at least temperature after min-p");
- ``llama.cpp``, ``vllm``, ``transformers``, ``ollama``: what a client that sets nothing gets from that engine,
  as facts.py's table holds it (with the version it was read from).
A preset's values replace the run's chain values; flags given beside it win (the CLI applies them after).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from playground.engines.facts import ENGINES
from playground.engines.gaps import shown
from playground.engines.model_cards import model_card
from playground.engines.settings import changed_values, sampler_params
from playground.errors import InvalidRequest
from strategies.sampling.samplers import PRESETS as ORDERS
from strategies.sampling.samplers import SamplerParams
from strategies.stages import stages_on

UNIVERSAL_SOURCE = "https://github.com/SillyTavern/SillyTavern/pull/1417"
PRESETS = ("model card", "neutral", "universal", "llama.cpp", "vllm", "transformers", "ollama")


@dataclass(frozen=True)
class Preset:
    """What a preset sets: the strategy (greedy where the values are temperature 0), the chain's values
    (order included; empty for greedy), the sentence that says so, and its source."""

    name: str
    strategy: str
    values: dict[str, Any]
    sentence: str
    source: str


def preset_key(name: str) -> str:
    """'Model-Card', 'model_card', 'vLLM' -> the preset's name in PRESETS."""
    key = str(name).strip().lower().replace("-", " ").replace("_", " ")
    key = {"modelcard": "model card", "llamacpp": "llama.cpp", "llama cpp": "llama.cpp"}.get(key, key)
    if key not in PRESETS:
        raise InvalidRequest(f"preset must be one of {', '.join(PRESETS)}, got {name!r}")
    return key


def made(name: str, values: dict[str, Any], said: str, source: str) -> Preset:
    """A preset from its values over everything off; the sentence lists what differs from off."""
    if float(values.get("temperature", 1.0)) == 0:
        return Preset(name, "greedy", {}, f"{name}: greedy decoding (temperature 0). {said}", source)
    params = sampler_params(values)
    changed = changed_values(params)
    order = changed.pop("order", params.order)
    shown_values = ", ".join(f"{k} {shown(v)}" for k, v in {"temperature": params.temperature, **changed}.items())
    full = {**changed, "order": order}
    return Preset(name, "sampling", full, f"{name}: set {shown_values}, everything else off, order "
                  f"{order_words(params)}. {said}", source)


def order_words(params: SamplerParams) -> str:
    """The order's preset name when it is one, else the stages the values turn on, in order."""
    for name, stages in ORDERS.items():
        if params.order == ",".join(stages):
            return name
    on = stages_on(params, params.order.split(","))
    return " → ".join(on or params.order.split(",")[:6] + ["…"])


def preset(name: str, model: str) -> Preset:
    """The preset ``name`` for ``model`` (only ``model card`` reads the model)."""
    key = preset_key(name)
    if key == "model card":
        card = model_card(model)
        left = f" Not carried: {'; '.join(card.left)}." if card.left else ""
        return made(key, {**card.values, "order": card.order}, f"The recommendation of {model}: {card.said}.{left}",
                    card.source)
    if key == "neutral":
        return made(key, {"order": "transformers"}, "The model's own distribution.", "strategies/sampling/samplers.py")
    if key == "universal":
        return made(key, {"min_p": 0.1, "temperature": 1.0, "order": "llama.cpp"},
                    "Min-p with temperature after it, as SillyTavern's Universal presets.", UNIVERSAL_SOURCE)
    facts = ENGINES[key]
    detail = " (GenerationConfig: do_sample False, max_length 20 counting the prompt; do_sample=True alone samples " \
             "at temperature 1 with top_k 50)" if key == "transformers" else ""
    return made(key, dict(facts.defaults), f"What a client that sets nothing gets from {facts.version}{detail}.",
                facts.defaults_source)
