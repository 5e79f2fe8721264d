"""What the lean forwards (``llama``, ``gemma``) share: their interface (``LeanForward``), the preallocated
KV cache, a layer's matrix (dense or 4-bit), RoPE's rotate-half and the rebinding of a module's weights to
views of a stack."""
from __future__ import annotations

from itertools import accumulate
from typing import Any, Literal, Protocol, TypedDict, Union

import torch
import torch.nn.functional as F

from playground.models import dtypes
from playground.models.fast.rows import call_rows, flat_rows, product, row_calls

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
        old_keys, old_values = self.tensors()
        n = self.length
        keys, values = self._empty(len(rows), old_keys.shape[3])
        keys[:, :, :, :n] = old_keys[:, rows.to(old_keys.device), :, :n]
        values[:, :, :, :n] = old_values[:, rows.to(old_values.device), :, :n]
        self.keys, self.values = keys, values

    @torch.inference_mode()
    def keep(self, positions: list[int]) -> None:
        """Keep only the cached positions ``positions`` (ascending), moved to the front: after a
        draft tree's pass, the accepted path's entries."""
        keys, values = self.tensors()
        index = torch.tensor(positions, device=self.device)
        n = len(positions)
        keys[:, :, :, :n] = keys.index_select(3, index)
        values[:, :, :, :n] = values.index_select(3, index)
        self.length = n

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values [layers, batch, kv_heads, capacity, head_dim]: allocated together by
        ``reserve`` (so by ``begin``), before any pass writes or reads them."""
        assert self.keys is not None and self.values is not None, "the cache is allocated by reserve()"
        return self.keys, self.values

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
            old_keys, old_values = self.tensors()
            keys, values = self._empty(batch, _blocks(max(2 * capacity, self.length + new)))
            keys[:, :, :, : self.length] = old_keys[:, :, :, : self.length]
            values[:, :, :, : self.length] = old_values[:, :, :, : self.length]
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

# The names of a layer's stacked matrices that ``with_matrices`` may replace.
MatrixName = Literal["qkv", "out", "gate_up", "down"]


class LayerMatrices(TypedDict, total=False):
    """Those of one layer's stacked matrices that replace the lean forward's own (``with_matrices``)."""

    qkv: Weight
    out: Weight
    gate_up: Weight
    down: Weight


class LeanForward(Protocol):
    """A lean forward over a transformers model's weights (``LeanLlama``, ``LeanGemma``): what
    ``playground.models.lm.LM`` calls."""

    def new_cache(self) -> LeanCache: ...

    def forward(self, ids: torch.Tensor, cache: LeanCache, hidden: bool = False,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                last: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """Float logits [batch, n, vocab] of ``ids`` [batch, n] after what ``cache`` holds (which it
        extends), and with ``hidden`` the hidden states (embeddings + one per layer); with ``last``,
        the last row's logits alone [batch, 1, vocab] (each row's are a one-row product's, so they are
        the numbers the whole pass gives that row)."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head on a last hidden state."""
        ...

    def lens_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and the head the logit lens reads its many rows through (``lens_head``)."""
        ...

    def project(self, normed: torch.Tensor) -> torch.Tensor:
        """The LM head alone, on hidden states the final norm has already normed."""
        ...

    def truncated(self, model: Any, num_layers: int) -> LeanForward:
        """The first ``num_layers`` layers over ``model`` (a truncated transformers model)."""
        ...

    def with_matrices(self, model: Any, matrices: list[LayerMatrices], head: Weight | None = None,
                      ) -> LeanForward:
        """The same forward with some of each layer's stacked matrices (``qkv``, ``out``, ``gate_up``,
        ``down``) and the head replaced (the GGUF file's 4-bit blocks: ``playground.models.fast.int4``)."""
        ...


class LeanForwardClass(Protocol):
    """A lean forward's class: whether it takes a transformers model, and the forward over it."""

    def __call__(self, model: Any) -> LeanForward: ...

    def supports(self, model: Any) -> bool: ...


def linear(x: torch.Tensor, weight: Weight) -> torch.Tensor:
    """``x @ weight.T`` with each row's numbers those of a one-row product: at most the rows this
    CPU's kernel keeps exact go in one call (``playground.models.fast.rows``, probed per product),
    every call a fresh-strided [1, n, in] (``rows.call_rows``), a step's [1, 1, in] included, as
    transformers' step multiplies it."""
    flat = flat_rows(x)
    rows = flat.shape[0]
    calls = [rows] if rows == 1 else row_calls(weight, rows)
    parts = [product(call_rows(flat, end - n, end), weight) for end, n in zip(accumulate(calls), calls)]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
    return out.view(*x.shape[:-1], out.shape[-1])


def stepwise_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: list[int],
                       gather: torch.Tensor | None = None, step_mask: Any = None, **kwargs: Any) -> torch.Tensor:
    """Attention of several query rows, each computed as a one-token step at its position computes it.

    ``q`` [batch, heads, n, head_dim]; ``keys``, ``values`` [batch, kv_heads, capacity, head_dim] (a
    cache layer); row r sees ``lengths[r]`` keys: the cache's first ``lengths[r]`` positions, or with
    ``gather`` [n, max length] the cache slots ``gather[r, :lengths[r]]`` (a draft tree: the prefix,
    then the row's ancestors and itself). ``step_mask(length)`` is the mask a step with that many keys
    passes (None for none: a sliding window's rows have one).

    Why: torch's CPU attention splits its reduction over keys by the number of keys, so a row of an
    n-row pass (all rows see ``end`` keys, the later ones masked) rounds differently in bfloat16 from
    the step that sees exactly its own keys; a near tie can then flip, and verification would part
    from plain decoding. Each row here is one call with exactly the step's keys, mask and order
    (rows with the same number of keys share a call as a batch: attention is exact across batch
    rows), so scoring k tokens in one pass gives the k steps' attention bit for bit.
    """
    batch, heads, n, dim = q.shape
    out = q.new_empty(batch, heads, n, values.shape[-1])
    groups: dict[int, list[int]] = {}
    for row, length in enumerate(lengths):
        groups.setdefault(length, []).append(row)
    for length, rows in groups.items():
        mask = step_mask(length) if step_mask is not None else None
        if gather is None:
            for row in rows:
                out[:, :, row: row + 1] = F.scaled_dot_product_attention(
                    q[:, :, row: row + 1], keys[:, :, :length], values[:, :, :length], attn_mask=mask, **kwargs)
            continue
        index = gather[rows, :length].to(keys.device)  # [g, length]
        g = len(rows)
        k = keys[:, :, index].permute(0, 2, 1, 3, 4).reshape(batch * g, keys.shape[1], length, dim)
        v = values[:, :, index].permute(0, 2, 1, 3, 4).reshape(batch * g, values.shape[1], length, -1)
        rows_q = q[:, :, rows].permute(0, 2, 1, 3).reshape(batch * g, heads, 1, dim)
        attn = F.scaled_dot_product_attention(rows_q, k, v, attn_mask=mask, **kwargs)
        out[:, :, rows] = attn.reshape(batch, g, heads, -1).permute(0, 2, 1, 3)
    return out


def tree_rows(attention_mask: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """For an additive tree mask [1, 1, n, cached + n] (0 where a row may look): each row's number of
    visible keys and the cache slots it sees, in order ([n, max], padded with 0)."""
    visible = attention_mask[0, 0] == 0
    lengths = visible.sum(-1).tolist()
    slots = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, length in enumerate(lengths):
        slots[row, :length] = visible[row].nonzero()[:, 0].cpu()
    return lengths, slots


def lens_head(head: Weight, dense: torch.Tensor) -> Weight:
    """The head the logit lens reads a step's inner layers through (one row per layer, off the clock).

    ``head`` is the forward's own; ``dense`` the model's dense head, the same matrix in bfloat16 when
    ``head`` is the GGUF file's blocks (``playground.models.fast.int4``: the file's values rounded to
    bfloat16). On a CPU that multiplies bfloat16 natively (AMX or AVX-512 BF16, through oneDNN) many
    rows through the dense matrix cost about what reading it once costs, while the 4-bit kernel's cost
    grows with the rows (it computes in float32, one FMA per weight and row): Gemma 3's 262,144 x 640
    head over 18 rows, 109 ms in its two 4-bit planes and 24 ms dense (2 threads of an AMX CPU).
    Without those instructions (or with torch held below its AVX-512 kernels, as ``ATEN_CPU_CAPABILITY``
    holds it to show another CPU) bfloat16 is emulated and slower than the kernel, so ``head`` stays."""
    if isinstance(head, torch.Tensor) or dense.dtype != torch.bfloat16 or dense.device.type != "cpu":
        return head
    native = dtypes.cpu_has_native_bf16() and torch.backends.cpu.get_cpu_capability() == "AVX512"
    return dense if native else head


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation in the rotate-half layout transformers uses: (x1, x2) -> (-x2, x1) on the two halves
    of the last axis."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` with its first half negated, for ``rope``: made once a pass, not once a layer."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` bit for bit, in 3 operations instead of 7: rotate_half(x) * sin is
    (-x2 s1, x1 s2) and roll(x) * signed_sin(sin) is (x2 (-s1), x1 s2), the same products (a sign
    flip is exact), where roll by half the last axis swaps its halves."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin_signed


def rebind(linears: list[Any], stacked: torch.Tensor) -> None:
    """Point each module's weight at its rows of ``stacked`` (the modules' weights concatenated in
    order), so the transformers model and the lean forward share memory and numbers."""
    row = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight = torch.nn.Parameter(stacked[row: row + rows], requires_grad=False)
        row += rows
