"""A lean forward for the llama family (SmolLM2): the same arithmetic as transformers' ``LlamaModel``
in a few fused operations per layer, over a preallocated KV cache.

On a CPU a small model's decode step is dominated by per-operation overhead, not arithmetic: 30
layers of a dozen small modules each. Here a layer is one RMSNorm, one matmul for Q, K and V
(their weights stacked), RoPE on Q and K at once, a copy into the cache, one
``scaled_dot_product_attention`` (grouped-query heads shared natively), the output matmul, a second
RMSNorm, one matmul for gate and up (stacked), SiLU-times-up and the down matmul; the style of
gpt-fast. The weights are the transformers model's own: its Q/K/V and gate/up parameters are
rebound to views of the stacked tensors, so the two paths share memory and numbers. A layer's four
matrices may instead be the GGUF file's 4-bit blocks (``with_matrices``, ``playground.models.fast.int4``).

A 4D additive mask with position ids runs a tree of drafts in one pass (EAGLE), and the cache's
``keep`` then keeps the accepted path, so every speculative draft runs on this forward.

The arithmetic follows transformers step by step (Touvron et al. 2023, LLaMA; Su et al. 2021,
RoFormer, for RoPE in the rotate-half layout that transformers uses): RMSNorm in float32, cast
back, then times the weight; cos/sin computed in float32 and cast to the model dtype.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from playground.models.fast.layers import (
    LayerMatrices,
    LeanCache,
    Weight,
    lens_head,
    linear,
    rebind,
    rope,
    signed_sin,
    stepwise_attention,
    tree_rows,
)


@dataclass
class LeanLayer:
    input_norm: torch.Tensor  # [d]
    qkv: Weight  # [(heads + 2 kv_heads) * head_dim, d]
    out: Weight  # [d, heads * head_dim]
    post_norm: torch.Tensor  # [d]
    gate_up: Weight  # [2 * intermediate, d]
    down: Weight  # [d, intermediate]


class LeanLlama:
    """The decoder stack of a transformers ``LlamaForCausalLM`` as plain tensors.

    ``forward(ids [batch, n], cache) -> (logits [batch, n, vocab], hidden states)``; the logits are in
    the model dtype, or float32 from a head of two 4-bit planes (``playground.models.fast.int4``).
    """

    def __init__(self, model: Any, layers: list[LeanLayer] | None = None, head: Weight | None = None):
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = float(cfg.rms_norm_eps)
        base = model.model
        self.embed = base.embed_tokens.weight
        self.norm = base.norm.weight
        self.head = model.lm_head.weight if head is None else head
        self.lens_head = lens_head(self.head, model.lm_head.weight)
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.inv_freq = base.rotary_emb.inv_freq.float()
        self.rope_scale = float(getattr(base.rotary_emb, "attention_scaling", 1.0))
        self.layers = layers if layers is not None else [_stack(layer) for layer in base.layers]

    @staticmethod
    def supports(model: Any) -> bool:
        """Plain llama: RoPE without scaling, no biases, SiLU, no sliding window."""
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        return (getattr(cfg, "model_type", "") == "llama" and cfg.hidden_act == "silu"
                and not getattr(cfg, "attention_bias", False) and not getattr(cfg, "mlp_bias", False)
                and rope.get("rope_type", "default") == "default" and getattr(cfg, "pretraining_tp", 1) == 1)

    def truncated(self, model: Any, num_layers: int) -> "LeanLlama":
        """The first ``num_layers`` layers (shared tensors) with ``model``'s norm and head."""
        return LeanLlama(model, self.layers[:num_layers], self.head)

    def with_matrices(self, model: Any, matrices: list[LayerMatrices], head: Weight | None = None) -> "LeanLlama":
        """The same norms and embedding with each layer's matrices replaced (``qkv``, ``out``,
        ``gate_up``, ``down``: e.g. the GGUF file's 4-bit blocks), and the head if given."""
        return LeanLlama(model, [replace(layer, **m) for layer, m in zip(self.layers, matrices, strict=True)],
                         head)

    def new_cache(self) -> LeanCache:
        return LeanCache(len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """transformers' LlamaRMSNorm: normalise in float32, cast back, then scale."""
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head: [..., d] -> [..., vocab] in the model dtype."""
        return linear(self.rms_norm(hidden, self.norm), self.head)

    def lens_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + the lens's head (``lens_head``) on many rows read off the clock."""
        return linear(self.rms_norm(hidden, self.norm), self.lens_head)

    def project(self, normed: torch.Tensor) -> torch.Tensor:
        """The LM head alone, on hidden states the final norm has already normed."""
        return linear(normed, self.head)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [batch or 1, n, 1, head_dim] for positions [batch or 1, n]."""
        freqs = positions.to(self.device, torch.float32)[..., None] * self.inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos() * self.rope_scale, angles.sin() * self.rope_scale
        return cos.to(self.dtype)[:, :, None], sin.to(self.dtype)[:, :, None]

    def forward(self, ids: torch.Tensor, cache: LeanCache, hidden: bool = False,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                last: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """``attention_mask`` (additive, [batch, 1, n, cached + n]) with ``position_ids`` [batch, n]
        runs a draft tree in one pass, as transformers does with a 4D mask (``strategies.speculative.eagle.tree``)."""
        batch, n = ids.shape
        start, end, position_ids = cache.begin(ids, position_ids)
        keys, values = cache.tensors()  # allocated by begin
        # each layer's views, made once a pass: where this pass writes, and what a step reads
        new_keys, new_values = keys[:, :, :, start:end].unbind(0), values[:, :, :, start:end].unbind(0)
        seen_keys, seen_values = keys[:, :, :, :end].unbind(0), values[:, :, :, :end].unbind(0)
        cos, sin = self._rope(position_ids)
        sin = signed_sin(sin)
        # One new token sees every cached key, so it needs no mask. Several rows (a prompt, a draft to
        # verify, a tree) attend row by row, each as its one-token step would (``stepwise_attention``),
        # so a text's logits do not depend on how it was cut into passes.
        lengths, gather = None, None
        if attention_mask is not None:
            lengths, gather = tree_rows(attention_mask)
        elif n > 1:
            lengths = list(range(start + 1, end + 1))
        x = F.embedding(ids, self.embed)
        states = [x] if hidden else None
        q_width = self.heads * self.head_dim
        for i, layer in enumerate(self.layers):
            h = self.rms_norm(x, layer.input_norm)
            qkv = linear(h, layer.qkv).view(batch, n, self.heads + 2 * self.kv_heads, self.head_dim)
            qk = qkv[:, :, : self.heads + self.kv_heads]
            qk = rope(qk, cos, sin)
            q = qk[:, :, : self.heads].transpose(1, 2)
            new_keys[i].copy_(qk[:, :, self.heads:].transpose(1, 2))
            new_values[i].copy_(qkv[:, :, self.heads + self.kv_heads:].transpose(1, 2))
            if lengths is None:
                attn = F.scaled_dot_product_attention(q, seen_keys[i], seen_values[i],
                                                      enable_gqa=True)
            else:
                attn = stepwise_attention(q, keys[i], values[i], lengths, gather, enable_gqa=True)
            x = x + linear(attn.transpose(1, 2).reshape(batch, n, q_width), layer.out)
            h = self.rms_norm(x, layer.post_norm)
            gate, up = linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + linear(F.silu(gate) * up, layer.down)
            if states is not None:
                states.append(x)
        cache.length = end
        if states is not None:
            states[-1] = self.rms_norm(x, self.norm)  # as transformers: the last entry is normed
            return linear(states[-1][:, -1:] if last else states[-1], self.head), tuple(states)
        return self.logits(x[:, -1:] if last else x), None


def _stack(layer: Any) -> LeanLayer:
    """Stack Q/K/V and gate/up, and rebind the module's parameters to views of the stacks."""
    attn, mlp = layer.self_attn, layer.mlp
    qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach()
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
    rebind([attn.q_proj, attn.k_proj, attn.v_proj], qkv)
    rebind([mlp.gate_proj, mlp.up_proj], gate_up)
    return LeanLayer(layer.input_layernorm.weight.detach(), qkv, attn.o_proj.weight.detach(),
                     layer.post_attention_layernorm.weight.detach(), gate_up, mlp.down_proj.weight.detach())
