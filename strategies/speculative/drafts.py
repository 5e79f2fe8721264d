"""Drafts for speculative decoding: cheap proposers that share the target's tokenizer.

Three kinds, one small interface (``prefill``, ``propose``, ``rollback``). A
proposal ends at the first end-of-text token: nothing after it could enter the
text, so nothing after it is drafted or verified.

- ``ModelDraft`` around a smaller model of the same family (``toy-small`` for
  ``toy``; online ``gpt2`` for ``gpt2-xl``), checked to share the tokenizer;
- the same class around ``LM.truncated(L)``: the target's own first L layers,
  final norm and LM head (self-speculation as in LayerSkip, Elhoushi et al.
  2024, here without its early-exit training), sharing every weight but with
  its own, shorter KV cache;
- ``PromptLookupDraft``: no model at all. The last n tokens are looked up in the
  prompt and the output so far, and what followed their latest earlier
  occurrence is proposed (prompt lookup decoding, Saxena 2023; transformers'
  ``prompt_lookup_num_tokens``). It pays off when the answer copies its input:
  summaries, code edits, quotes.

What a one-hot draft means for rejection sampling: the proposal is a point mass,
draft(x) = 1, so min(1, target(x) / draft(x)) = target(x): a looked-up token is
accepted with exactly the target's probability of it, and on rejection the
residual norm(max(0, target - one_hot(x))) is the target with x removed. Summed
over both branches the output is still exactly the target's distribution, so
prompt lookup is lossless under ``rejection`` like any other draft; it just
cannot be "less confident" than the target, so it is accepted less often than a
good model draft when the target is unsure. Under greedy it is accepted exactly
when it guesses the target's argmax.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.pairing import check_shared_tokenizer
from strategies.sampling.chain import apply_chain
from strategies.speculative.verify import sample

KINDS = ("early_exit", "prompt_lookup", "eagle")  # eagle runs tree rounds (strategies.speculative.eagle.decoder)  # any other value of ``draft`` is a model key


@dataclass
class Proposal:
    """G drafted tokens and the distribution each was drawn from.

    ids: the G drafted ids.
    probs: [G, V] the draft's distribution at each drafted position after the chain (one-hot for lookup).
    forward_passes: draft model calls spent on it.
    """

    ids: list[int]
    probs: torch.Tensor
    forward_passes: int = 0


# --- caches that can be rolled back exactly ---------------------------------------------------


def rollback_cache(lm: LanguageModel) -> Any:
    """A fresh KV cache of ``lm`` whose ``crop`` restores an earlier state exactly.

    Sliding-window layers (Gemma 3) keep only their last window - 1 keys, so by default
    ``DynamicSlidingWindowLayer.crop`` refuses once the window is full: the keys a rollback would
    need are gone. ``activate_past_recording`` makes them keep new keys until the next ``crop``,
    which removes the rejected ones and trims back to the window. Caches that still cannot be
    rolled back (linear-attention layers) are refused.
    """
    cache = lm.new_cache()
    if any(getattr(cache, "is_sliding", [])):
        cache.activate_past_recording()
    if not getattr(cache, "is_croppable", True):
        raise InvalidRequest(f"speculative decoding needs a KV cache that can be rolled back; the cache of "
                             f"{lm.key} has layers that cannot be cropped")
    return cache


def crop(cache: Any, tokens_to_remove: int) -> None:
    """Drop the last ``tokens_to_remove`` positions (never more than were added since the last crop).

    transformers 5 takes the count as a negative number; ``crop(0)`` still trims sliding-window
    layers back to their window, so it is called after every round to keep memory flat.
    """
    if tokens_to_remove < 0:
        raise ValueError(f"tokens_to_remove must be >= 0, got {tokens_to_remove}")
    if cache.get_seq_length() == 0:  # nothing cached yet (a one-token prompt); sliding layers can't crop that
        return
    cache.crop(-tokens_to_remove)


# --- the model draft (a smaller model, or the target's first layers) ---------------------------


class ModelDraft:
    """A draft language model with its own KV cache.

    The cache covers ``ids[:seen]``; ``propose`` feeds what it has not seen yet (the last committed
    token, or two after a fully accepted round) and then its own drafts one by one.
    """

    def __init__(self, lm: LanguageModel, kind: str):
        self.lm = lm
        self.kind = kind  # "model" or "early_exit"
        self.name = lm.key
        self.cache = rollback_cache(lm)
        self.seen = 0
        self.forward_passes = 0

    def prefill(self, prompt_ids: list[int]) -> None:
        """Run the prompt except its last token (the first ``propose`` feeds that one)."""
        if len(prompt_ids) > 1:
            self._feed(prompt_ids[:-1])
        crop(self.cache, 0)

    def _feed(self, ids: list[int]) -> torch.Tensor:
        """Feed ``ids`` after the cache; [V] float32 logits for the next position."""
        out = self.lm.forward(torch.tensor([ids], device=self.lm.device), self.cache)
        self.cache = out.cache
        self.seen += len(ids)
        self.forward_passes += 1
        return out.logits[0, -1]

    def propose(self, ids: list[int], gamma: int, chain: list, generator: torch.Generator,
                stop_ids: frozenset[int] | set[int]) -> Proposal:
        """Draw up to ``gamma`` tokens autoregressively from the draft's chained distribution, up to and
        including the first of ``stop_ids``."""
        drafted: list[int] = []
        rows: list[torch.Tensor] = []
        passes = self.forward_passes
        pending = ids[self.seen:]
        for _ in range(gamma):
            logits = self._feed(pending)
            context = torch.tensor([ids + drafted], device=self.lm.device)
            probs = apply_chain(chain, logits.unsqueeze(0), context).softmax(-1)
            token = int(sample(probs, generator)[0])
            rows.append(probs[0])
            drafted.append(token)
            if token in stop_ids:
                break
            pending = [token]
        probs = torch.stack(rows) if rows else torch.zeros(0, self.lm.vocab_size, device=self.lm.device)
        return Proposal(drafted, probs, self.forward_passes - passes)

    def rollback(self, length: int) -> None:
        """Keep at most ``ids[:length]`` in the cache (drafts beyond the accepted ones go)."""
        remove = max(0, self.seen - length)
        crop(self.cache, remove)
        self.seen -= remove


# --- prompt lookup: no model ------------------------------------------------------------------


def lookup(ids: list[int], max_ngram: int, gamma: int) -> list[int]:
    """Up to ``gamma`` tokens that followed the latest earlier occurrence of the longest suffix n-gram.

    n goes from ``max_ngram`` down to 1; longer matches are more specific, so they are tried first.
    An empty list means no n-gram of the tail occurred before.
    """
    for n in range(min(max_ngram, len(ids) - 1), 0, -1):
        tail = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start:start + n] == tail:
                return ids[start + n:start + n + gamma]
    return []


class PromptLookupDraft:
    """Proposes a continuation copied from the prompt and output so far (see the module docstring)."""

    kind = "prompt_lookup"
    name = "prompt_lookup"

    def __init__(self, vocab_size: int, device: torch.device, max_ngram: int):
        self.vocab_size = vocab_size
        self.device = device
        self.max_ngram = max_ngram
        self.forward_passes = 0  # never changes: there is no model

    def prefill(self, prompt_ids: list[int]) -> None:
        """Nothing to run."""

    def propose(self, ids: list[int], gamma: int, chain: list, generator: torch.Generator,
                stop_ids: frozenset[int] | set[int]) -> Proposal:
        """A deterministic proposal, cut after the first of ``stop_ids``; its distribution is one-hot at
        each looked-up token."""
        drafted = lookup(ids, self.max_ngram, gamma) if gamma > 0 else []
        stops = [i for i, token in enumerate(drafted) if token in stop_ids]
        drafted = drafted[: stops[0] + 1] if stops else drafted
        probs = torch.zeros(len(drafted), self.vocab_size, device=self.device)
        if drafted:
            probs[torch.arange(len(drafted)), torch.tensor(drafted)] = 1.0
        return Proposal(drafted, probs, 0)

    def rollback(self, length: int) -> None:
        """Nothing cached."""


Draft = ModelDraft | PromptLookupDraft


# --- choosing a draft -------------------------------------------------------------------------


def auto_layer(num_layers: int) -> int:
    """The early-exit depth used for ``draft_layer = -1``: a quarter of the target, at least one layer."""
    return max(1, num_layers // 4)


def make_draft(target: LanguageModel, draft: str, draft_layer: int, lookup_ngram: int,
               load_model: Callable[[str], LanguageModel] | None) -> Draft:
    """The draft named by ``draft``: "early_exit", "prompt_lookup", or a model key."""
    if draft == "prompt_lookup":
        return PromptLookupDraft(target.vocab_size, target.device, lookup_ngram)
    if draft == "early_exit":
        if draft_layer == 0 or draft_layer > target.num_layers:
            raise InvalidRequest(f"draft_layer must be in [1, {target.num_layers}] for {target.key}, or -1 "
                                 f"(= {auto_layer(target.num_layers)}), got {draft_layer}")
        layers = auto_layer(target.num_layers) if draft_layer == -1 else draft_layer
        short = target if layers == target.num_layers else target.truncated(layers)
        return ModelDraft(short, "early_exit")
    if load_model is None:
        raise InvalidRequest(f"draft model {draft!r} cannot be loaded here; use early_exit or prompt_lookup")
    model = load_model(draft)
    check_shared_tokenizer(target, model, "draft model")
    return ModelDraft(model, "model")
