"""The EAGLE-1 draft head: predicts the target's next final-layer feature, the target's LM head reads it.

Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty": at position
t the head takes concat(embedding of token t+1, feature f_t), where f_t is the target's last hidden
state (the vector its LM head reads), maps it with a Linear 2d -> d, runs one decoder layer of the
target's own kind (a llama layer for SmolLM2, a GPT-2 block for toy) and outputs f̂_{t+1}; the
target's frozen LM head turns that into the distribution of token t+2. Knowing f_t, the head
predicts a feature rather than a token, which is easier.

The decoder layer is a one-layer model of the target's class built from its config, with its
token embedding removed (the target's is reused) and its own final norm kept (trainable: a small
addition to the paper's head, which lets the output match the target's normed features). Only the
head's own weights are stored: ``head.safetensors`` next to ``head.json`` (its record: data, steps,
losses, held-out tau) under ``assets/eagle/<model key>/``.

A head may draft from a reduced vocabulary (FR-Spec, Zhao et al. 2025, "FR-Spec: Accelerating
Large-Vocabulary Language Models via Frequency-Ranked Speculative Sampling"): its LM-head reading
multiplies only by the rows of the N most frequent target tokens of its training data. The map from
draft index to target id is stored with the weights (``draft_ids``, most frequent first) and read
back with them; without it a reduced head would silently draft ids 0..N-1. Verification still uses
the target's whole distribution, so the output is unchanged: only drafts outside the N are impossible.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from playground import ASSETS
from playground.seam import LanguageModel

HEADS = ASSETS / "eagle"
ATTACHED_KEY = "eagle_head"  # where load_head keeps a loaded head in ``LM.attached``


def head_dir(key: str) -> Path:
    return HEADS / key


def has_head(key: str) -> bool:
    return (head_dir(key) / "head.safetensors").exists()


def _one_layer_config(config: Any) -> Any:
    cfg = copy.deepcopy(config)
    cfg.num_hidden_layers = 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:1]
    cfg.use_cache = True
    return cfg


class EagleHead(nn.Module):
    """fc (2d -> d) + one decoder layer (+ final norm) of the target's kind.

    ``forward`` takes the next tokens' embeddings [B, n, d] (from the target) and the features
    [B, n, d] at the positions before them, and returns the predicted features [B, n, d] and the
    layer's KV cache; ``attention_mask`` (4D additive) and ``position_ids`` drive tree drafting.
    """

    def __init__(self, target_config: Any, draft_ids: torch.Tensor | None = None):
        super().__init__()
        from transformers import AutoModel
        d = int(target_config.hidden_size)
        self.fc = nn.Linear(2 * d, d)
        self.layer = AutoModel.from_config(_one_layer_config(target_config))
        embedding = self.layer.get_input_embeddings()
        for name, child in list(self.layer.named_children()):
            if child is embedding:  # the target's embedding is used instead; never stored twice
                setattr(self.layer, name, None)
        self.register_buffer("draft_ids", None, persistent=True)
        if draft_ids is not None:
            self.set_draft_ids(draft_ids)

    def set_draft_ids(self, ids: torch.Tensor) -> None:
        """Draft only from the target ids ``ids`` (distinct, in range; most frequent first)."""
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if ids.numel() == 0 or len(set(ids.tolist())) != ids.numel() or int(ids.min()) < 0:
            raise ValueError("draft_ids must be distinct non-negative target ids")
        self.draft_ids = ids.to(self.fc.weight.device)

    def forward(self, embeddings: torch.Tensor, features: torch.Tensor, cache: Any = None,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, Any]:
        x = self.fc(torch.cat([embeddings, features], dim=-1))
        out = self.layer(inputs_embeds=x, past_key_values=cache, use_cache=cache is not None,
                         attention_mask=attention_mask, position_ids=position_ids)
        return out.last_hidden_state, out.past_key_values

    def new_cache(self) -> Any:
        from transformers import DynamicCache
        return DynamicCache(config=self.layer.config)


def save_head(head: EagleHead, key: str, record: dict[str, Any], root: Path = HEADS) -> Path:
    from safetensors.torch import save_file
    folder = root / key
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(folder / "head.safetensors"))
    (folder / "head.json").write_text(json.dumps(record, indent=1) + "\n")
    return folder


def load_head(lm: LanguageModel, root: Path = HEADS) -> tuple[EagleHead, dict[str, Any]]:
    """The head shipped for ``lm`` and its training record, loaded once per LM (kept in ``lm.attached``)."""
    cached = lm.attached.get(ATTACHED_KEY)
    if cached is not None:
        return cached
    from safetensors.torch import load_file
    folder = root / lm.key
    state = load_file(str(folder / "head.safetensors"))
    head = EagleHead(lm.model.config, state.get("draft_ids"))
    head.load_state_dict(state, strict=True)
    if head.draft_ids is not None and int(head.draft_ids.max()) >= lm.vocab_size:
        raise ValueError(f"the {lm.key} head drafts id {int(head.draft_ids.max())}, past the vocabulary "
                         f"({lm.vocab_size})")
    head.to(lm.device, dtype=lm.model.dtype).eval()
    loaded = (head, json.loads((folder / "head.json").read_text()))
    lm.attached[ATTACHED_KEY] = loaded
    return loaded
