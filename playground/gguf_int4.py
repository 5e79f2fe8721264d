"""The GGUF file's own 4-bit weights, multiplied without dequantising them first.

A GGUF file stores most of a small model's matrices in 4-bit blocks of 32 weights along a row:
Q4_1 keeps a float16 scale ``d`` and offset ``m`` per block (weight = d * q + m, q in 0..15), Q4_0
a scale only (weight = d * (q - 8)); see ggml's ``ggml-common.h``. transformers dequantises them
to float32 when it loads the file, so the float32 model holds exactly these values.

torch's CPU int4 kernel (``_weight_int4pack_mm_for_cpu``, written for gpt-fast's int4 weight-only
path) computes x @ W.T for W = (q - 8) * scale + zero in groups of 32 along a row, with the
activations, scales and zeros in bfloat16. That is the same form: Q4_1 is scale d and
zero m + 8 d, Q4_0 is scale d and zero 0. So a layer here reads the very weights llama.cpp reads
from the file, 5 bits each instead of 16 (as in the file), with one rounding: the scale and zero are held in
bfloat16 (8 bits of mantissa; the file has float16's 11).

The file's rows may be stored in another order than transformers' (llama's Q and K rows are
permuted for llama.cpp's RoPE layout), so each matrix is matched to the loaded float32 weight row by
row, by exact value; a matrix that does not match exactly is refused, never guessed.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

GROUP = 32  # weights per block along a row, in Q4_0 and Q4_1 alike
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20}  # float16 d (Q4_1: and m), then 16 bytes of packed nibbles
# transformers' llama module names -> the GGUF tensor names of one layer
LLAMA_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
               "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


@dataclass
class Blocks:
    """One matrix of 4-bit blocks: the kernel's form weight[r, c] = (q[r, c] - 8) * scale + zero, with
    scale and zero per block of 32 along the row, and ``values``, the file's weights as gguf-py
    dequantises them to float32 (Q4_1: d * q + m; Q4_0: (q - 8) * d), which transformers loads."""

    q: np.ndarray  # int32 [rows, cols], 0..15
    scale: np.ndarray  # float32 [rows, cols // 32]
    zero: np.ndarray  # float32 [rows, cols // 32]
    values: np.ndarray  # float32 [rows, cols]

    def rows(self, order: list[int]) -> "Blocks":
        return Blocks(self.q[order], self.scale[order], self.zero[order], self.values[order])


def read_blocks(tensor: Any) -> Blocks:
    """The blocks of one gguf-py ``ReaderTensor`` of type Q4_0 or Q4_1."""
    kind = tensor.tensor_type.name
    if kind not in BLOCK_BYTES:
        raise ValueError(f"{tensor.name} is {kind}, not a 4-bit block type ({', '.join(BLOCK_BYTES)})")
    data = np.asarray(tensor.data)
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, BLOCK_BYTES[kind])
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    packed = blocks[..., 4:] if kind == "Q4_1" else blocks[..., 2:]
    # byte j of a block holds weight j in its low nibble and weight j + 16 in its high nibble
    q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.int32)  # [rows, blocks, 32]
    qf = q.astype(np.float32)
    if kind == "Q4_1":
        m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        values, zero = d[..., None] * qf + m[..., None], m + 8 * d
    else:
        values, zero = (qf - 8) * d[..., None], np.zeros_like(d)
    return Blocks(q.reshape(rows, -1), d, zero, values.reshape(rows, -1))


def match_rows(blocks: Blocks, weight: torch.Tensor, name: str) -> Blocks:
    """``blocks`` in the row order of ``weight`` (float32, the loaded model's), matched by exact value."""
    index = {blocks.values[i].tobytes(): i for i in range(len(blocks.values))}
    w = weight.detach().to("cpu", torch.float32).numpy()
    if w.shape != blocks.values.shape:
        raise ValueError(f"{name}: the file's matrix is {blocks.values.shape}, the model's {w.shape}")
    order = [index.get(w[i].tobytes(), -1) for i in range(len(w))]
    if -1 in order:
        raise ValueError(f"{name}: row {order.index(-1)} of the loaded weight is not a row of the file's 4-bit blocks")
    return blocks.rows(order)


class Int4Linear:
    """``x @ W.T`` for a 4-bit block matrix W, through torch's CPU int4 kernel (bfloat16 activations)."""

    def __init__(self, parts: list[Blocks]):
        q = np.concatenate([p.q for p in parts])
        scale = np.concatenate([p.scale for p in parts])
        zero = np.concatenate([p.zero for p in parts])
        self.out_features, self.in_features = q.shape
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(q), 1)
        # [groups, rows, 2]: the kernel's layout of scales and zeros
        self.scales_zeros = torch.from_numpy(np.stack([scale, zero], -1)).transpose(0, 1).contiguous().bfloat16()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_zeros)
        return y.view(*shape[:-1], self.out_features)

    def dequantised(self) -> torch.Tensor:
        """The weights the kernel multiplies by, float32 [out, in] (an identity matrix through the kernel)."""
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)
        return self(eye).float().T.contiguous()

    @property
    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size() + self.scales_zeros.numel() * 2


@lru_cache(maxsize=8)
def _reader(path: str) -> Any:
    from gguf import GGUFReader
    return GGUFReader(path)


def llama_layers_are_4bit(path: Path, num_layers: int) -> bool:
    """Whether every matrix of the ``num_layers`` layers is stored in 4-bit blocks in the file."""
    try:
        tensors = {t.name: t.tensor_type.name for t in _reader(str(path)).tensors}
    except Exception:  # a file gguf-py cannot read has no usable blocks
        return False
    return all(tensors.get(f"blk.{i}.{name}.weight") in BLOCK_BYTES
               for i in range(num_layers) for name in LLAMA_NAMES.values())


def llama_linears(model: Any, path: Path) -> list[dict[str, Int4Linear]]:
    """Per layer of a transformers llama model: ``qkv``, ``out``, ``gate_up`` and ``down`` as
    Int4Linear over the file's blocks, Q/K/V and gate/up stacked as the lean forward stacks them."""
    tensors = {t.name: t for t in _reader(str(path)).tensors}
    layers = []
    for i, layer in enumerate(model.model.layers):
        modules = {**dict(layer.self_attn.named_children()), **dict(layer.mlp.named_children())}

        def blocks(module: str) -> Blocks:
            name = f"blk.{i}.{LLAMA_NAMES[module]}.weight"
            return match_rows(read_blocks(tensors[name]), modules[module].weight, name)

        layers.append({"qkv": Int4Linear([blocks("q_proj"), blocks("k_proj"), blocks("v_proj")]),
                       "out": Int4Linear([blocks("o_proj")]),
                       "gate_up": Int4Linear([blocks("gate_proj"), blocks("up_proj")]),
                       "down": Int4Linear([blocks("down_proj")])})
    return layers
