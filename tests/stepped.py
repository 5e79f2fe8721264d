"""transformers fed one token at a time: the reference the lean forwards equal bit for bit."""
from __future__ import annotations

import torch


def hf_stepped(lm, ids: torch.Tensor, cache=None, hidden: bool = False):
    """transformers' own forward of ``lm.model`` fed one token at a time (a fresh cache unless given):
    float32 logits [batch, n, vocab], and with ``hidden`` the hidden states, each [batch, n, d]. The
    lean forward computes every row of a pass as this one-token step does (its attention row by row)."""
    from transformers import DynamicCache
    cache = DynamicCache(config=lm.model.config) if cache is None else cache
    logits, states = [], []
    with torch.inference_mode():
        for i in range(ids.shape[1]):
            out = lm.model(input_ids=ids[:, i:i + 1], past_key_values=cache, use_cache=True,
                           output_hidden_states=hidden)
            logits.append(out.logits.float())
            states.append(out.hidden_states)
    if not hidden:
        return torch.cat(logits, 1)
    return torch.cat(logits, 1), tuple(torch.cat(layer, 1) for layer in zip(*states))
