"""What the lean forwards (``llama``, ``gemma``) share: the preallocated KV cache, a layer's matrix
(dense or 4-bit), RoPE's rotate-half and the rebinding of a module's weights to views of a stack."""
from __future__ import annotations

from typing import Any, Union

import torch
import torch.nn.functional as F

CACHE_BLOCK = 256  # the cache grows in whole blocks, so a decode step never reallocates


class LeanCache:
    """A KV cache of preallocated tensors [layers, batch, kv_heads, capacity, head_dim].

    The methods strategies call on a transformers cache, with the same meaning:
    ``get_seq_length()``, ``crop(-n)`` (drops the last n positions; ``crop(0)`` does nothing),
    ``reorder_cache(rows)`` (gathers batch rows; may change the batch size, as beams grow from
    one prompt row). Cropping only moves the length: the positions beyond it are overwritten next.
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
        self.shape = (layers, kv_heads, head_dim)
        self.dtype, self.device = dtype, device
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes minus the number of positions to drop, got {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)

    def reorder_cache(self, rows: torch.Tensor) -> None:
        if self.keys is None:
            return
        n = self.length
        keys, values = self._empty(len(rows), self.keys.shape[3])
        keys[:, :, :, :n] = self.keys[:, rows.to(self.keys.device), :, :n]
        values[:, :, :, :n] = self.values[:, rows.to(self.values.device), :, :n]
        self.keys, self.values = keys, values

    @torch.inference_mode()
    def keep(self, positions: list[int]) -> None:
        """Keep only the cached positions ``positions`` (ascending), moved to the front: after a
        draft tree's pass, the accepted path's entries."""
        index = torch.tensor(positions, device=self.device)
        n = len(positions)
        self.keys[:, :, :, :n] = self.keys.index_select(3, index)
        self.values[:, :, :, :n] = self.values.index_select(3, index)
        self.length = n

    def begin(self, ids: torch.Tensor, position_ids: torch.Tensor | None) -> tuple[int, int, torch.Tensor]:
        """Room for a pass over ``ids`` [batch, n]: (its first and end position, its position ids,
        by default the next n positions)."""
        batch, n = ids.shape
        start = self.length
        self.reserve(batch, n)
        if position_ids is None:
            position_ids = torch.arange(start, start + n, device=self.device)[None]
        return start, start + n, position_ids

    def reserve(self, batch: int, new: int) -> None:
        """Room for ``new`` more positions of ``batch`` rows (a fresh cache takes the batch it is fed)."""
        if self.keys is None or (self.length == 0 and self.keys.shape[1] != batch):
            self.keys, self.values = self._empty(batch, _blocks(new))
            return
        if self.keys.shape[1] != batch:
            raise ValueError(f"the cache holds {self.keys.shape[1]} rows, got a batch of {batch}")
        capacity = self.keys.shape[3]
        if self.length + new > capacity:
            keys, values = self._empty(batch, _blocks(max(2 * capacity, self.length + new)))
            keys[:, :, :, : self.length] = self.keys[:, :, :, : self.length]
            values[:, :, :, : self.length] = self.values[:, :, :, : self.length]
            self.keys, self.values = keys, values

    def _empty(self, batch: int, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        layers, heads, dim = self.shape
        shape = (layers, batch, heads, capacity, dim)
        return (torch.empty(shape, dtype=self.dtype, device=self.device),
                torch.empty(shape, dtype=self.dtype, device=self.device))


def _blocks(n: int) -> int:
    return -(-n // CACHE_BLOCK) * CACHE_BLOCK


# A layer's matrix: a dense weight [out, in] for F.linear, or a callable x -> x @ W.T over another
# storage (playground.models.fast.int4.Int4Linear: the GGUF file's 4-bit blocks).
Weight = Union[torch.Tensor, Any]


def linear(x: torch.Tensor, weight: Weight) -> torch.Tensor:
    return F.linear(x, weight) if isinstance(weight, torch.Tensor) else weight(x)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation in the rotate-half layout transformers uses: (x1, x2) -> (-x2, x1) on the two halves
    of the last axis."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rebind(linears: list[Any], stacked: torch.Tensor) -> None:
    """Point each module's weight at its rows of ``stacked`` (the modules' weights concatenated in
    order), so the transformers model and the lean forward share memory and numbers."""
    row = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight = torch.nn.Parameter(stacked[row: row + rows], requires_grad=False)
        row += rows
