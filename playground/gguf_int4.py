"""The GGUF file's own 4-bit (and 8-bit) weights, multiplied without dequantising them first.

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

The LM head is often Q8_0 (weight = d * q, q in -128..127, per block of 32): it is split exactly
into two 4-bit planes (``read_blocks``), so the head too runs on the file's values, through two
calls of the same kernel whose products are added in float32.

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

GROUP = 32  # weights per block along a row, in Q4_0, Q4_1 and Q8_0 alike
# bytes per block: float16 d (Q4_1: and m), then 16 bytes of packed nibbles (Q8_0: 32 int8)
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}
FOUR_BIT = ("Q4_0", "Q4_1")
# transformers' llama module names -> the GGUF tensor names of one layer
LLAMA_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
               "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


@dataclass
class Blocks:
    """One matrix as a sum of 4-bit planes in the kernel's form: weight[r, c] is the sum over planes p
    of (q[p, r, c] - 8) * scale[p, r, c // 32] + zero[p, r, c // 32]. A 4-bit type is one plane.
    ``values`` are the file's weights as gguf-py dequantises them to float32 (Q4_1: d * q + m;
    Q4_0: (q - 8) * d; Q8_0: d * q), which is what transformers loads."""

    q: np.ndarray  # int32 [planes, rows, cols], 0..15
    scale: np.ndarray  # float32 [planes, rows, cols // 32]
    zero: np.ndarray  # float32 [planes, rows, cols // 32]
    values: np.ndarray  # float32 [rows, cols]

    def rows(self, order: list[int]) -> "Blocks":
        return Blocks(self.q[:, order], self.scale[:, order], self.zero[:, order], self.values[order])


def read_blocks(tensor: Any) -> Blocks:
    """The blocks of one gguf-py ``ReaderTensor`` of type Q4_0, Q4_1 or Q8_0.

    Q8_0 (weight = d * q, q in -128..127) becomes two 4-bit planes: with u = q + 128 = 16 h + l,
    d * q = 16 d (h - 8) + (d (l - 8) + 8 d), so plane one has scale 16 d and zero 0, plane two
    scale d and zero 8 d; both are exact once d is in bfloat16 (16 d and 8 d only shift its exponent)."""
    kind = tensor.tensor_type.name
    if kind not in BLOCK_BYTES:
        raise ValueError(f"{tensor.name} is {kind}, not a block type the kernel takes ({', '.join(BLOCK_BYTES)})")
    data = np.asarray(tensor.data)
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, BLOCK_BYTES[kind])
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)  # [rows, blocks]
    if kind == "Q8_0":
        signed = blocks[..., 2:].copy().view(np.int8).astype(np.int32)  # [rows, blocks, 32]
        u = signed + 128
        q = np.stack([u >> 4, u & 15])
        scale, zero = np.stack([16 * d, d]), np.stack([np.zeros_like(d), 8 * d])
        values = d[..., None] * signed.astype(np.float32)
    else:
        packed = blocks[..., 4:] if kind == "Q4_1" else blocks[..., 2:]
        # byte j of a block holds weight j in its low nibble and weight j + 16 in its high nibble
        nibbles = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.int32)  # [rows, blocks, 32]
        qf = nibbles.astype(np.float32)
        q = nibbles[None]
        if kind == "Q4_1":
            m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
            values, scale, zero = d[..., None] * qf + m[..., None], d[None], (m + 8 * d)[None]
        else:
            values, scale, zero = (qf - 8) * d[..., None], d[None], np.zeros_like(d)[None]
    return Blocks(q.reshape(len(q), rows, -1), scale, zero, values.reshape(rows, -1))


def match_rows(blocks: Blocks, weight: torch.Tensor, name: str) -> Blocks:
    """``blocks`` in the row order of ``weight`` (float32, the loaded model's), matched by exact value."""
    index = {blocks.values[i].tobytes(): i for i in range(len(blocks.values))}
    w = weight.detach().to("cpu", torch.float32).numpy()
    if w.shape != blocks.values.shape:
        raise ValueError(f"{name}: the file's matrix is {blocks.values.shape}, the model's {w.shape}")
    order = [index.get(w[i].tobytes(), -1) for i in range(len(w))]
    if -1 in order:
        raise ValueError(f"{name}: row {order.index(-1)} of the loaded weight is not a row of the file's blocks")
    return blocks.rows(order)


class Int4Linear:
    """``x @ W.T`` for a matrix of 4-bit planes, through torch's CPU int4 kernel (bfloat16 activations).

    One plane gives a bfloat16 product, as a dense bfloat16 matrix would; with two planes (Q8_0)
    the two bfloat16 products are added in float32 and the result is float32."""

    def __init__(self, parts: list[Blocks]):
        q = np.concatenate([p.q for p in parts], axis=1)
        scale = np.concatenate([p.scale for p in parts], axis=1)
        zero = np.concatenate([p.zero for p in parts], axis=1)
        self.out_features, self.in_features = q.shape[1:]
        self.packed = [torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(plane), 1) for plane in q]
        # [groups, rows, 2] per plane: the kernel's layout of scales and zeros
        self.scales_zeros = [torch.from_numpy(np.stack([s, z], -1)).transpose(0, 1).contiguous().bfloat16()
                             for s, z in zip(scale, zero)]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        y = None
        for packed, scales_zeros in zip(self.packed, self.scales_zeros):
            part = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, packed, GROUP, scales_zeros)
            y = part if y is None else y.float() + part
        return y.view(*shape[:-1], self.out_features)

    def dequantised(self) -> torch.Tensor:
        """The weights the kernel multiplies by, float32 [out, in] (an identity matrix through the
        kernel: each plane's product is read back in bfloat16)."""
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)
        return self(eye).float().T.contiguous()

    @property
    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() + s.numel() * 2 for p, s in zip(self.packed, self.scales_zeros))


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
    return all(tensors.get(f"blk.{i}.{name}.weight") in FOUR_BIT
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


def head_linear(model: Any, path: Path) -> Int4Linear | None:
    """The LM head over the file's blocks (its ``output`` tensor, or the token embedding it is tied
    to), or None when the file stores it in a type the kernel does not take."""
    tensors = {t.name: t for t in _reader(str(path)).tensors}
    tensor = tensors.get("output.weight") or tensors.get("token_embd.weight")
    if tensor is None or tensor.tensor_type.name not in BLOCK_BYTES:
        return None
    return Int4Linear([match_rows(read_blocks(tensor), model.get_output_embeddings().weight, tensor.name)])
