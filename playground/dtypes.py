"""The weight dtype a request runs in: ``auto``, ``float32`` or ``bfloat16``.

``float32`` is the reference: the transformers model exactly as loaded. ``bfloat16`` halves the
bytes read per token; on a CPU with native bfloat16 instructions (AVX512-BF16, AMX) that is the
fast path, and llama-family models then also run through ``playground.lean_llama``. Whatever the
dtype, logits reach the transform chain in float32.

``auto`` means: on a GPU, the dtype the model was loaded in (as before); on a CPU, bfloat16 when
the CPU has native bfloat16 and float32 elsewhere; the toy models always stay in float32 (their
known branch probabilities are what they teach, and they are too small to gain anything).
"""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from playground.errors import InvalidRequest

DTYPES = ("auto", "float32", "bfloat16")
_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# /proc/cpuinfo flags of CPUs that multiply bfloat16 natively.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def check_dtype(name: Any) -> str:
    if name not in DTYPES:
        raise InvalidRequest(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@lru_cache(maxsize=1)
def cpu_has_native_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return bool(NATIVE_BF16_FLAGS & set(line.split(":", 1)[-1].split()))
    return False


def resolve_dtype(name: str, device: torch.device, loaded: torch.dtype, toy: bool) -> torch.dtype:
    """The torch dtype ``name`` stands for, for a model on ``device`` loaded in ``loaded``."""
    check_dtype(name)
    if name != "auto":
        return _BY_NAME[name]
    if device.type != "cpu":
        return loaded
    if toy or not cpu_has_native_bf16():
        return torch.float32
    return torch.bfloat16


def cast_model(model: Any, dtype: torch.dtype) -> Any:
    """A copy of a transformers model in ``dtype``. The RoPE inverse frequencies stay float32, as
    ``from_pretrained(dtype=...)`` leaves them: ``.to(bfloat16)`` would round them (relative error up to
    2**-9), and the rotary angle at position t would drift by that fraction of t radians."""
    cast = copy.deepcopy(model).to(dtype)
    originals = dict(model.named_buffers())
    for name, buffer in cast.named_buffers():
        if name.endswith("inv_freq"):
            buffer.data = originals[name].data.clone()
    return cast
