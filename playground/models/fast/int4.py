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

import functools
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from playground.models.architectures import ARCHITECTURES, architecture_of
from playground.models.fast.gguf_tensors import tensor_table
from playground.models.fast.layers import LayerMatrices, MatrixName

GROUP = 32  # the kernel's group: one scale and zero per 32 weights along a row
# bytes per block of each type the kernel takes (Q4_K: a super-block of 256 weights, 8 groups of 32)
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q4_K": 144, "Q5_0": 22, "Q8_0": 34}
MATCH_ROWS = 8192  # rows of file values read at a time to match a matrix's rows (21 MB at 640 columns)
PACK_ROWS = 4096  # rows of a plane packed at a time, where the kernel packs rows apart (_packs_by_rows)
# the GGUF tensor names of one layer, of every architecture (playground.models.architectures)
LAYER_NAMES = frozenset(name for arch in ARCHITECTURES for name in arch.int4_layer_names.values())


def kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


@dataclass
class Blocks:
    """One matrix as a sum of 4-bit planes in the kernel's form: weight[r, c] is the sum over planes p
    of (q[p, r, c] - 8) * scale[p, r, c // 32] + zero[p, r, c // 32]. A 4-bit type is one plane.
    ``raw`` holds the file's bytes of these rows (``kind`` their type), from which ``values`` reads
    the weights as gguf-py dequantises them to float32, which is what transformers loads: on demand,
    since a head of 262,144 rows is 671 MB of float32 that only the row check reads."""

    q: np.ndarray  # uint8 [planes, rows, cols], 0..15
    scale: np.ndarray  # float32 [planes, rows, cols // 32]
    zero: np.ndarray  # float32 [planes, rows, cols // 32]
    raw: np.ndarray | None = None  # uint8 [rows, bytes per row]: the file's blocks of these rows
    kind: str = ""

    def rows(self, order: list[int]) -> "Blocks":
        return Blocks(self.q[:, order], self.scale[:, order], self.zero[:, order],
                      None if self.raw is None else self.raw[order], self.kind)

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape[1], self.q.shape[2]

    def values_of(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``start:stop`` as gguf-py dequantises them, float32."""
        from gguf import GGMLQuantizationType, dequantize
        if self.raw is None:
            raise ValueError("these blocks were not read from a file, so they have no file values")
        rows = self.raw[start:stop]
        return dequantize(rows, GGMLQuantizationType[self.kind]).reshape(len(rows), -1)

    @property
    def values(self) -> np.ndarray:
        return self.values_of()


def read_blocks(tensor: Any) -> Blocks:
    """The blocks of one ``GGUFTensor`` (``playground.models.fast.gguf_tensors``) of a type in ``BLOCK_BYTES``, as 4-bit planes.

    Q4_0, Q4_1 and Q4_K (whose 6-bit group scales and minimums make d * sc and dmin * m per group of
    32) are one plane. Q8_0 (weight = d * q, q in -128..127) is two: with u = q + 128 = 16 h + l,
    d * q = 16 d (h - 8) + (d (l - 8) + 8 d), so plane one has scale 16 d and zero 0, plane two scale
    d and zero 8 d. Q5_0 (weight = d * (q - 16), q = 16 h + l in 0..31) is two as well: plane one
    the high bit h with scale 16 d and zero 128 d, plane two the low nibble l with scale d and
    zero -8 d. Those split scales and zeros are exact once d is in bfloat16 (powers of two times d)."""
    kind = tensor.kind
    if kind not in BLOCK_BYTES:
        raise ValueError(f"{tensor.name} is {kind}, not a block type the kernel takes ({', '.join(BLOCK_BYTES)})")
    data = np.asarray(tensor.data)
    rows = data.shape[0]
    blocks = data.reshape(rows, -1, BLOCK_BYTES[kind])
    d = _f16(blocks, 0)  # [rows, blocks]
    if kind == "Q4_K":
        q, scale, zero = _q4_k(blocks, d)
    elif kind == "Q8_0":
        # u = q + 128 is the int8 q's bits with the sign bit flipped, so its high nibble is the
        # byte's high nibble with bit 3 flipped and its low nibble the byte's; both are written in
        # place (a head's planes are 168 MB each)
        q = np.empty((2, *blocks[..., 2:].shape), np.uint8)
        np.right_shift(blocks[..., 2:], 4, out=q[0])
        np.bitwise_xor(q[0], 8, out=q[0])
        np.bitwise_and(blocks[..., 2:], 15, out=q[1])
        scale, zero = np.stack([16 * d, d]), np.stack([np.zeros_like(d), 8 * d])
    elif kind == "Q5_0":
        high = blocks[..., 2:6].copy().view(np.uint32)  # [rows, blocks, 1]: bit j is weight j's fifth bit
        q = np.stack([((high >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8), _nibbles(blocks[..., 6:])])
        scale, zero = np.stack([16 * d, d]), np.stack([128 * d, -8 * d])
    elif kind == "Q4_1":
        m = _f16(blocks, 2)
        q, scale, zero = _nibbles(blocks[..., 4:])[None], d[None], (m + 8 * d)[None]
    else:
        q, scale, zero = _nibbles(blocks[..., 2:])[None], d[None], np.zeros_like(d)[None]
    planes = len(q)
    return Blocks(q.reshape(planes, rows, -1), scale.reshape(planes, rows, -1), zero.reshape(planes, rows, -1),
                  data.reshape(rows, -1), kind)


def _f16(blocks: np.ndarray, offset: int) -> np.ndarray:
    return blocks[..., offset:offset + 2].copy().view(np.float16)[..., 0].astype(np.float32)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """16 bytes -> 32 weights: byte j holds weight j in its low nibble and weight j + 16 in its high one."""
    return np.concatenate([packed & 15, packed >> 4], axis=-1)


def _q4_k(blocks: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q4_K super-blocks (d, dmin, 12 bytes of 6-bit scales and minimums, 128 bytes of nibbles) as
    one plane of groups of 32: scale d * sc, zero 8 d * sc - dmin * m (gguf-py: d * sc * q - dmin * m)."""
    rows, supers = d.shape
    dmin = _f16(blocks, 2)
    packed = blocks[..., 4:16].reshape(rows, supers, 3, 4)
    a, b, c = packed[..., 0, :], packed[..., 1, :], packed[..., 2, :]
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 2) & 0x30)], axis=-1).astype(np.float32)  # [rows, supers, 8]
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 2) & 0x30)], axis=-1).astype(np.float32)
    # 4 chunks of 32 bytes; chunk c's low nibbles are group 2c, its high nibbles group 2c + 1
    chunks = blocks[..., 16:].reshape(rows, supers, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 1, 2, 1)
    q = (chunks & 15).reshape(1, rows, -1)
    group_scale = d[..., None] * sc  # [rows, supers, 8]
    zero = 8 * group_scale - dmin[..., None] * mn
    return q, group_scale.reshape(1, rows, -1), zero.reshape(1, rows, -1)


def match_rows(blocks: Blocks, weight: torch.Tensor, name: str) -> Blocks:
    """``blocks`` in the row order of ``weight`` (float32, the loaded model's), matched by exact value.
    The file's values are read ``MATCH_ROWS`` rows at a time, so a large head never holds them whole."""
    w = weight.detach().to("cpu", torch.float32).numpy()
    if w.shape != blocks.shape:
        raise ValueError(f"{name}: the file's matrix is {blocks.shape}, the model's {w.shape}")
    rows = len(w)
    chunks = range(0, rows, MATCH_ROWS)
    if all(np.array_equal(w[i:i + MATCH_ROWS], blocks.values_of(i, i + MATCH_ROWS)) for i in chunks):
        return blocks
    index: dict[bytes, int] = {}
    for i in chunks:
        index.update((row.tobytes(), i + j) for j, row in enumerate(blocks.values_of(i, i + MATCH_ROWS)))
    order = [index.get(w[i].tobytes(), -1) for i in range(rows)]
    if -1 in order:
        raise ValueError(f"{name}: row {order.index(-1)} of the loaded weight is not a row of the file's blocks")
    return blocks.rows(order)


class Int4Linear:
    """``x @ W.T`` for a matrix of 4-bit planes, through torch's CPU int4 kernel (bfloat16 activations).

    Each plane's product is bfloat16, as a dense bfloat16 matrix's would be; two planes (Q8_0, Q5_0)
    are added in float32. The result is bfloat16, or float32 with ``float_out`` (the LM head: logits)."""

    def __init__(self, parts: list[Blocks], float_out: bool = False):
        self.float_out = float_out
        planes = max(len(p.q) for p in parts)
        parts = [_padded(p, planes) for p in parts]
        if len(parts) == 1:  # a head: used as it is (a concatenation would copy its planes)
            q, scale, zero = parts[0].q, parts[0].scale, parts[0].zero
        else:
            q, scale, zero = (np.concatenate([getattr(p, f) for p in parts], axis=1) for f in ("q", "scale", "zero"))
        self.out_features, self.in_features = q.shape[1:]
        self.packed = [pack(plane) for plane in q]
        # [groups, rows, 2] per plane: the kernel's layout of scales and zeros
        self.scales_zeros = [torch.from_numpy(np.stack([s, z], -1)).transpose(0, 1).contiguous().bfloat16()
                             for s, z in zip(scale, zero)]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features)
        # conversions only where needed: a decode step calls this 4 times a layer, and a call that
        # changes nothing still costs a dispatch (about a tenth of a small model's step in all)
        if flat.dtype != torch.bfloat16:
            flat = flat.to(torch.bfloat16)
        if not flat.is_contiguous():
            flat = flat.contiguous()
        y = None
        for packed, scales_zeros in zip(self.packed, self.scales_zeros):
            part = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, packed, GROUP, scales_zeros)
            y = part if y is None else y.float() + part
        assert y is not None, "an Int4Linear has at least one plane"
        if self.float_out:
            y = y.float()
        elif y.dtype != torch.bfloat16:  # two planes add in float32
            y = y.to(torch.bfloat16)
        return y.view(*shape[:-1], self.out_features)

    def dequantised(self) -> torch.Tensor:
        """The weights the kernel multiplies by, float32 [out, in] (an identity matrix through the
        kernel: each plane's product is read back in bfloat16)."""
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)
        return self(eye).float().T.contiguous()

    @property
    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() + s.numel() * 2 for p, s in zip(self.packed, self.scales_zeros))


def pack(q: np.ndarray) -> torch.Tensor:
    """One plane, uint8 [rows, cols] in 0..15, in the packed layout of the kernel this process runs.

    The layout is the dispatched kernel's own (AVX-512, AVX2 and the default kernel each pack the
    same matrix to other bytes), so it comes from torch's converter, which dispatches the same way
    the multiply does; no layout is written here. The converter takes rows in multiples of 16, as
    int32. A large plane goes through it ``PACK_ROWS`` rows at a time, where this process's kernel
    packs a slice of rows to the same rows of the whole's result (``_packs_by_rows``, checked once):
    a head's plane as int32 whole would be 671 MB."""
    rows, cols = q.shape
    if rows % 16:
        raise ValueError(f"the int4 kernel takes matrices of rows in multiples of 16, this one has {rows}")
    if rows <= PACK_ROWS or not _packs_by_rows():
        return _convert(q)
    first = _convert(q[:PACK_ROWS])
    out = torch.empty((rows, *first.shape[1:]), dtype=first.dtype)
    out[:PACK_ROWS] = first
    for i in range(PACK_ROWS, rows, PACK_ROWS):
        out[i:i + PACK_ROWS] = _convert(q[i:i + PACK_ROWS])
    return out


def _convert(q: np.ndarray) -> torch.Tensor:
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(q.astype(np.int32)), 1)


@functools.cache
def _packs_by_rows() -> bool:
    """Whether this process's converter packs rows apart: slices of ``PACK_ROWS`` rows (and a
    shorter last one) give the rows of the whole's result (a random plane of 2.5 slices)."""
    q = np.random.default_rng(0).integers(0, 16, (PACK_ROWS * 2 + PACK_ROWS // 2, 64), dtype=np.uint8)
    whole = _convert(q)
    return whole.shape[0] == len(q) and all(
        torch.equal(_convert(q[i:i + PACK_ROWS]), whole[i:i + PACK_ROWS]) for i in range(0, len(q), PACK_ROWS))


def _padded(blocks: Blocks, planes: int) -> Blocks:
    """``blocks`` with planes of zeros added (q = 8, scale and zero 0) up to ``planes``."""
    extra = planes - len(blocks.q)
    if extra == 0:
        return blocks
    pad = np.zeros((extra, *blocks.scale.shape[1:]), np.float32)
    return Blocks(np.concatenate([blocks.q, np.full((extra, *blocks.q.shape[1:]), 8, np.uint8)]),
                  np.concatenate([blocks.scale, pad]), np.concatenate([blocks.zero, pad]), blocks.raw, blocks.kind)


def has_blocks(path: Path) -> bool:
    """Whether the file stores its head or any layer matrix in a type the kernel takes."""
    try:
        tensors = tensor_table(str(path))
    except (OSError, ValueError, struct.error):  # a file that cannot be read has no usable blocks
        return False
    names = {f".{n}.weight" for n in LAYER_NAMES}
    return any(t.kind in BLOCK_BYTES and (name in ("output.weight", "token_embd.weight")
                                          or (name.startswith("blk.") and name[name.index(".", 4):] in names))
               for name, t in tensors.items())


def layer_linears(model: Any, path: Path) -> list[LayerMatrices]:
    """Per layer of a transformers llama or Gemma 3 model: those of ``qkv``, ``out``, ``gate_up`` and
    ``down`` whose every part the file stores in a block type the kernel takes, as Int4Linear over
    the file's blocks (Q/K/V and gate/up stacked as the lean forwards stack them). A matrix left out
    stays as it is (bfloat16)."""
    arch = architecture_of(model)
    if arch is None:
        raise ValueError(f"no int4 layer names are known for {model.config.model_type} models")
    tensors = tensor_table(str(path))
    stacks: dict[MatrixName, tuple[str, ...]] = {"qkv": ("q_proj", "k_proj", "v_proj"), "out": ("o_proj",),
                                                  "gate_up": ("gate_proj", "up_proj"), "down": ("down_proj",)}
    layers = []
    for i, layer in enumerate(model.model.layers):
        modules = {**dict(layer.self_attn.named_children()), **dict(layer.mlp.named_children())}
        matrices: LayerMatrices = {}
        for stack, parts in stacks.items():
            names = [f"blk.{i}.{arch.int4_layer_names[part]}.weight" for part in parts]
            if all(name in tensors and tensors[name].kind in BLOCK_BYTES for name in names):
                matrices[stack] = Int4Linear([match_rows(read_blocks(tensors[name]), modules[part].weight, name)
                                              for name, part in zip(names, parts)])
        layers.append(matrices)
    return layers


def head_linear(model: Any, path: Path) -> Int4Linear | None:
    """The LM head over the file's blocks (its ``output`` tensor, or the token embedding it is tied
    to), or None when the file stores it in a type the kernel does not take."""
    tensors = tensor_table(str(path))
    tensor = tensors.get("output.weight") or tensors.get("token_embd.weight")
    if tensor is None or tensor.kind not in BLOCK_BYTES:
        return None
    return Int4Linear([match_rows(read_blocks(tensor), model.get_output_embeddings().weight, tensor.name)],
                      float_out=True)
