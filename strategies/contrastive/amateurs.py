"""Where the amateur's next-token logits come from.

Three kinds, one small interface: ``next_logits(expert_out, context) -> [1, vocab]``,
called once per step after the expert's forward on the same context.

- ``ModelAmateur``: another model sharing the expert's tokenizer (toy-small for
  toy; online gpt2 for gpt2-large, SmolLM2-135M for SmolLM2-360M). It keeps its
  own KV cache: one forward on the prompt, then one per token, like the expert.
- ``EarlyExitAmateur``: the expert's own premature layer read through the final
  norm and the LM head (DoLa, Chuang et al. 2023). It reads the hidden states of
  the expert's forward, so it costs no forward of its own, only one LM-head
  product per step.
- ``WindowAmateur``: the expert restricted to the last ``n`` tokens of the
  context (plus the start-of-text token, which the model was trained to see
  first and which carries no content). An exact window cannot reuse a KV cache:
  the keys of the window's tokens depend on the tokens before them, which
  differ at every step. So it re-runs the model on the window, with no cache:
  one forward of ``n + 1`` tokens per step, about ``n + 1`` times the arithmetic
  of a cached step (the LM head included: the seam returns logits for every
  position), though the weights are read once, so on a memory-bound device a
  short window costs about one extra forward per token. While the context still
  fits in the window the amateur is the expert, and the expert's logits are
  reused for free.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.pairing import check_shared_tokenizer


class Amateur(Protocol):
    name: str  # shown in the trace, e.g. "toy-small", "early_exit@9", "window@8"
    needs_hidden: bool  # whether the expert's forward must return hidden states
    forward_passes: int  # forwards the amateur ran on its own
    tokens_processed: int  # tokens those forwards read

    def next_logits(self, expert_out: Any, context: torch.Tensor) -> torch.Tensor:
        """Logits [1, vocab] for the token after ``context`` [1, n]."""
        ...


class ModelAmateur:
    """Another model on the same tokenizer, with its own KV cache (one forward per token)."""

    needs_hidden = False

    def __init__(self, lm: LanguageModel, vocab: int):
        self.lm, self.vocab = lm, vocab
        self.name = lm.key
        self.cache, self.seen = None, 0
        self.forward_passes = self.tokens_processed = 0

    def next_logits(self, expert_out: Any, context: torch.Tensor) -> torch.Tensor:
        new = context[:, self.seen:]  # the prompt at first, then the one token just committed
        out = self.lm.forward(new, self.cache)
        self.cache, self.seen = out.cache, context.shape[1]
        self.forward_passes += 1
        self.tokens_processed += new.shape[1]
        return out.logits[:, -1, :self.vocab]


class EarlyExitAmateur:
    """Layer ``layer`` of the expert (0 = the embeddings) through the final norm and LM head (DoLa)."""

    needs_hidden = True
    forward_passes = 0
    tokens_processed = 0

    def __init__(self, expert: LanguageModel, layer: int):
        self.expert, self.layer = expert, layer
        self.name = f"early_exit@{layer}"

    def next_logits(self, expert_out: Any, context: torch.Tensor) -> torch.Tensor:
        # hidden_states[0] is the embedding output, [i] the output of layer i; the last entry is
        # already normed, which is why the layer stops one short of the expert's depth.
        return self.expert.logits_from_hidden(expert_out.hidden_states[self.layer][:, -1])


class WindowAmateur:
    """The expert on the last ``window`` tokens only (plus a leading start-of-text token)."""

    needs_hidden = False

    def __init__(self, expert: LanguageModel, window: int):
        self.expert, self.window = expert, window
        self.name = f"window@{window}"
        self.forward_passes = self.tokens_processed = 0

    def next_logits(self, expert_out: Any, context: torch.Tensor) -> torch.Tensor:
        keep_bos = context[0, 0].item() == self.expert.tokenizer.bos_token_id
        if context.shape[1] <= self.window + int(keep_bos):
            return expert_out.logits[:, -1]  # the window holds the whole context: same as the expert
        tail = context[:, -self.window:]
        short = torch.cat([context[:, :1], tail], dim=1) if keep_bos else tail
        out = self.expert.forward(short)
        self.forward_passes += 1
        self.tokens_processed += short.shape[1]
        return out.logits[:, -1]


def auto_layer(num_layers: int) -> int:
    """The premature layer used when none is given: five sixths of the way up the stack.

    Measured on Gemma 3 270M (18 layers) on prompts where greedy loops: contrasting with a late
    layer (15) broke the loops on every prompt tried, a middle one (9) rarely did. A plausible
    reading: by a late layer the copy-the-context prediction is already formed, so subtracting
    it penalises the repeating continuation most.
    """
    return min(num_layers - 1, round(num_layers * 5 / 6))


def make_amateur(expert: LanguageModel, kind: str, layer: int, window: int, load_model: Any,
                 max_new_tokens: int, n_prompt: int) -> Amateur:
    """Build the amateur named by ``kind``: "early_exit", "window" or another model's key."""
    if kind == "early_exit":
        expert.decoder_parts()  # raises InvalidRequest for an architecture without the seam
        top = expert.num_layers - 1
        layer = auto_layer(expert.num_layers) if layer < 0 else layer
        if not 0 <= layer <= top:
            raise InvalidRequest(f"amateur_layer must be in [0, {top}] for {expert.key} "
                                 f"(or -1 for layer {auto_layer(expert.num_layers)}), got {layer}")
        return EarlyExitAmateur(expert, layer)
    if kind == "window":
        return WindowAmateur(expert, window)
    if load_model is None:
        raise InvalidRequest(f"amateur {kind!r} is a model, but no model store was given to load it")
    lm = load_model(kind)
    vocab = check_shared_tokenizer(expert, lm, "amateur")
    lm.check_prompt_length(n_prompt, max_new_tokens)
    return ModelAmateur(lm, vocab)
