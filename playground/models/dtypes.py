"""The weights a request runs on: ``auto``, ``float32``, ``bfloat16`` or ``int4``.

``float32`` is the reference: the transformers model exactly as loaded. ``bfloat16`` halves the
bytes read per token; on a CPU with native bfloat16 instructions (AVX512-BF16, AMX) that is the
fast path, and llama and Gemma 3 models then also run through a lean forward
(``playground.models.fast.llama``, ``playground.models.fast.gemma``). ``int4`` is that lean forward multiplying
by the GGUF file's own blocks (``playground.models.fast.int4``): the weights llama.cpp reads from the same
file, 5 bits a weight for a 4-bit type (9 for one split into two planes) against bfloat16's 16;
norms and the embedding lookup stay bfloat16. Whatever the weights, logits reach the transform
chain in float32.

``auto`` means (``weights_order``): on a GPU, the dtype the model was loaded in; on a CPU, in
order, ``int4`` where torch runs its AVX2 or AVX-512 kernels and the model's GGUF file has blocks
the kernel takes, bfloat16 on a CPU with native bfloat16, float32; the engine takes the first that
passes its check against float32 on this CPU (``playground.models.fast.check``). The toy models
always stay in float32 (their known branch probabilities are what they teach, and they are too
small to gain anything).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import torch

from playground.errors import InvalidRequest
from playground.models.cpu import CPUINFO, cpu_flags, has_native_bf16
from playground.models.cpu import torch_capability as cpu_capability  # the kernels this process runs

DTYPES = ("auto", "float32", "bfloat16", "int4")
DEFAULT_DTYPE = "auto"  # what the page, the CLI, the API and a share link run when nothing is picked
_BY_NAME = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# torch CPU capabilities whose int4 kernel is vectorised and faster than float32 (docs/performance.md: the table);
# the DEFAULT kernel is scalar, 20x slower than float32 per matrix product.
INT4_FAST_CAPABILITIES = frozenset({"AVX2", "AVX512"})


def check_dtype(name: Any) -> str:
    if name not in DTYPES:
        raise InvalidRequest(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cpu_has_native_bf16(cpuinfo: Path = CPUINFO) -> bool:
    return has_native_bf16(cpu_flags(cpuinfo))


def weights_order(name: str, device: torch.device, loaded: torch.dtype, toy: bool,
                  has_int4: Callable[[], bool]) -> tuple[str, ...]:
    """The weights to try for ``name`` (a dtype's name or ``int4``), best first, for a model on
    ``device`` loaded in ``loaded``; ``has_int4()`` says whether its file's 4-bit blocks can run
    here. A named one is tried alone. ``auto`` ends with the weights as loaded, the reference that
    needs no check; the engine passes over any before it that fails its check on this CPU."""
    check_dtype(name)
    if name != "auto":
        return (name,)
    if device.type != "cpu":
        return (dtype_name(loaded),)
    if toy:
        return ("float32",)
    order = ["int4"] if cpu_capability() in INT4_FAST_CAPABILITIES and has_int4() else []
    if cpu_has_native_bf16():
        order.append("bfloat16")
    return (*order, "float32")


def cast_model(model: Any, dtype: torch.dtype) -> Any:
    """A copy of a transformers model in ``dtype``. The RoPE inverse frequencies stay float32, as
    ``from_pretrained(dtype=...)`` leaves them: ``.to(bfloat16)`` would round them (relative error up to
    2**-9), and the rotary angle at position t would drift by that fraction of t radians.

    Each floating tensor is cast straight from the original (the copy's structure comes from
    ``deepcopy``, told the cast tensors in advance): a deep copy first would write the whole model
    once more in float32 (1 GB for Gemma 3 270M) only to cast it. Tied weights stay tied."""
    memo: dict[int, Any] = {}
    for name, buffer in model.named_buffers(remove_duplicate=False):
        if id(buffer) not in memo:
            keep = name.endswith("inv_freq") or not buffer.is_floating_point()
            memo[id(buffer)] = buffer.clone() if keep else buffer.to(dtype, copy=True)
    for param in model.parameters():
        if id(param) not in memo:
            data = param.detach().to(dtype, copy=True) if param.is_floating_point() else param.detach().clone()
            memo[id(param)] = torch.nn.Parameter(data, requires_grad=param.requires_grad)
    return copy.deepcopy(model, memo)
