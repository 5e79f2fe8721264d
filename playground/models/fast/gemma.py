"""A lean forward for Gemma 3 text models (Gemma 3 270M): transformers' ``Gemma3TextModel`` in a
few fused operations per layer, over the same preallocated KV cache as ``playground.models.fast.llama``.

What differs from llama, following transformers step by step (Gemma Team 2025, Gemma 3 technical
report): the embedding is scaled by sqrt(hidden size) in the model dtype; every RMSNorm multiplies
by (1 + weight) in float32 before the cast back; Q and K are RMS-normed per head before RoPE; the
attention scale is ``query_pre_attn_scalar ** -0.5``; each layer has four norms (before and after
attention, before and after the MLP); the MLP is GELU (tanh approximation) of gate times up; and
local layers attend to a sliding window of the last ``sliding_window`` positions with their own
RoPE base (10,000) while global layers see everything (base 1,000,000).

The cache keeps every position, so cropping a rejected draft is exact; a local layer masks keys
older than its window instead of dropping them (the same keys as transformers' sliding cache).
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
class GemmaLayer:
    input_norm: torch.Tensor  # [d], each norm as (1 + weight) in float32
    qkv: Weight  # [(heads + 2 kv_heads) * head_dim, d]
    qk_norm: torch.Tensor  # [heads + kv_heads, 1, head_dim]: Q's norm for each query head, then K's
    out: Weight  # [d, heads * head_dim]
    post_attn_norm: torch.Tensor
    pre_mlp_norm: torch.Tensor
    gate_up: Weight  # [2 * intermediate, d]
    down: Weight  # [d, intermediate]
    post_mlp_norm: torch.Tensor
    sliding: bool  # a local layer: sliding window and the local RoPE base


class LeanGemma:
    """The decoder stack of a transformers ``Gemma3ForCausalLM`` as plain tensors; a ``LeanForward``
    (``playground.models.fast.layers``), as ``LeanLlama`` is."""

    def __init__(self, model: Any, layers: list[GemmaLayer] | None = None, head: Weight | None = None):
        cfg = model.config
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = float(cfg.rms_norm_eps)
        self.scaling = float(cfg.query_pre_attn_scalar) ** -0.5
        self.window = int(cfg.sliding_window)
        base = model.model
        self.embed = base.embed_tokens.weight
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.embed_scale = base.embed_tokens.embed_scale.to(self.dtype)
        self.norm = _norm_weight(base.norm)
        self.head = model.lm_head.weight if head is None else head
        self.lens_head = lens_head(self.head, model.lm_head.weight)
        rotary = base.rotary_emb
        self.inv_freq = {kind: getattr(rotary, f"{kind}_inv_freq").float() for kind in ("sliding_attention",
                                                                                          "full_attention")}
        self.rope_scale = {kind: float(getattr(rotary, f"{kind}_attention_scaling"))
                           for kind in ("sliding_attention", "full_attention")}
        self.layers = layers if layers is not None else [
            _stack(layer, kind == "sliding_attention") for layer, kind in zip(base.layers, cfg.layer_types)]

    @staticmethod
    def supports(model: Any) -> bool:
        """Gemma 3 text: default RoPE on both layer types, no soft-capping, causal, no biases."""
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or {}
        return (getattr(cfg, "model_type", "") == "gemma3_text" and cfg.hidden_activation == "gelu_pytorch_tanh"
                and cfg.attn_logit_softcapping is None and cfg.final_logit_softcapping is None
                and not cfg.attention_bias
                and not getattr(cfg, "use_bidirectional_attention", False)
                and all((rope.get(kind) or {}).get("rope_type") == "default"
                        for kind in ("sliding_attention", "full_attention")))

    def truncated(self, model: Any, num_layers: int) -> "LeanGemma":
        return LeanGemma(model, self.layers[:num_layers], self.head)

    def with_matrices(self, model: Any, matrices: list[LayerMatrices], head: Weight | None = None) -> "LeanGemma":
        return LeanGemma(model, [replace(layer, **m) for layer, m in zip(self.layers, matrices, strict=True)], head)

    def new_cache(self) -> LeanCache:
        return LeanCache(len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """transformers' Gemma3RMSNorm: normalise and scale by (1 + weight) in float32, then cast."""
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * weight).to(x.dtype)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return linear(self.rms_norm(hidden, self.norm), self.head)

    def lens_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + the lens's head (``lens_head``) on many rows read off the clock."""
        return linear(self.rms_norm(hidden, self.norm), self.lens_head)

    def project(self, normed: torch.Tensor) -> torch.Tensor:
        """The LM head alone, on hidden states the final norm has already normed."""
        return linear(normed, self.head)

    def _rope(self, positions: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(self.device, torch.float32)[..., None] * self.inv_freq[kind]
        angles = torch.cat((freqs, freqs), dim=-1)
        scale = self.rope_scale[kind]
        return (angles.cos() * scale).to(self.dtype)[:, None], (angles.sin() * scale).to(self.dtype)[:, None]

    def _step_mask(self, length: int) -> torch.Tensor | None:
        """A local layer's mask for the one-token step that sees ``length`` keys: none while they all fit
        in the window, else the last ``window`` of them."""
        if length <= self.window:
            return None
        return (length - 1 - torch.arange(length, device=self.device) < self.window)[None]

    def forward(self, ids: torch.Tensor, cache: LeanCache, hidden: bool = False,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                last: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        batch, n = ids.shape
        start, end, position_ids = cache.begin(ids, position_ids)
        keys, values = cache.tensors()  # allocated by begin
        # each layer's views, made once a pass: where this pass writes, and what a step reads
        new_keys, new_values = keys[:, :, :, start:end].unbind(0), values[:, :, :, start:end].unbind(0)
        seen_keys, seen_values = keys[:, :, :, :end].unbind(0), values[:, :, :, :end].unbind(0)
        ropes = {}
        for sliding in (False, True):
            cos, sin = self._rope(position_ids, "sliding_attention" if sliding else "full_attention")
            ropes[sliding] = cos, signed_sin(sin)
        # One new token: one call (a local layer masks keys beyond its window). Several rows (a prompt, a
        # draft to verify, a tree) attend row by row, each as its one-token step would
        # (``stepwise_attention``), so a text's logits do not depend on how it was cut into passes.
        lengths, gather = None, None
        if attention_mask is not None:
            lengths, gather = tree_rows(attention_mask)
        elif n > 1:
            lengths = list(range(start + 1, end + 1))
        # a local layer's mask for each row's number of keys, made once for every local layer
        local = {length: self._step_mask(length) for length in (lengths or [end])}
        x = F.embedding(ids, self.embed) * self.embed_scale
        states = [x] if hidden else None
        groups = self.heads + 2 * self.kv_heads
        for i, layer in enumerate(self.layers):
            h = self.rms_norm(x, layer.input_norm)
            qkv = linear(h, layer.qkv).view(batch, n, groups, self.head_dim).transpose(1, 2)
            qk = self.rms_norm(qkv[:, : self.heads + self.kv_heads], layer.qk_norm)  # per head, Q's and K's at once
            q, k = qk[:, : self.heads], qk[:, self.heads:]
            cos, sin = ropes[layer.sliding]
            q = rope(q, cos, sin)
            new_keys[i].copy_(rope(k, cos, sin))
            new_values[i].copy_(qkv[:, self.heads + self.kv_heads:])
            step_mask = local.get if layer.sliding else None
            if lengths is None:
                attn = F.scaled_dot_product_attention(q, seen_keys[i], seen_values[i],
                                                      attn_mask=local[end] if layer.sliding else None,
                                                      scale=self.scaling, enable_gqa=True)
            else:
                attn = stepwise_attention(q, keys[i], values[i], lengths, gather, step_mask,
                                          scale=self.scaling, enable_gqa=True)
            attn = linear(attn.transpose(1, 2).reshape(batch, n, self.heads * self.head_dim), layer.out)
            x = x + self.rms_norm(attn, layer.post_attn_norm)
            h = self.rms_norm(x, layer.pre_mlp_norm)
            gate, up = linear(h, layer.gate_up).chunk(2, dim=-1)
            mlp = linear(F.gelu(gate, approximate="tanh") * up, layer.down)
            x = x + self.rms_norm(mlp, layer.post_mlp_norm)
            if states is not None:
                states.append(x)
        cache.length = end
        if states is not None:
            states[-1] = self.rms_norm(x, self.norm)  # as transformers: the last entry is normed
            return linear(states[-1][:, -1:] if last else states[-1], self.head), tuple(states)
        return self.logits(x[:, -1:] if last else x), None


def _norm_weight(norm: Any) -> torch.Tensor:
    return 1.0 + norm.weight.detach().float()


def _stack(layer: Any, sliding: bool) -> GemmaLayer:
    """Stack Q/K/V and gate/up, and rebind the module's parameters to views of the stacks."""
    attn, mlp = layer.self_attn, layer.mlp
    qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach()
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
    rebind([attn.q_proj, attn.k_proj, attn.v_proj], qkv)
    rebind([mlp.gate_proj, mlp.up_proj], gate_up)
    heads, kv_heads = attn.config.num_attention_heads, attn.config.num_key_value_heads
    qk_norm = torch.cat([_norm_weight(attn.q_norm).expand(heads, 1, -1),
                         _norm_weight(attn.k_norm).expand(kv_heads, 1, -1)])
    return GemmaLayer(_norm_weight(layer.input_layernorm), qkv, qk_norm,
                      attn.o_proj.weight.detach(), _norm_weight(layer.post_attention_layernorm),
                      _norm_weight(layer.pre_feedforward_layernorm), gate_up, mlp.down_proj.weight.detach(),
                      _norm_weight(layer.post_feedforward_layernorm), sliding)
