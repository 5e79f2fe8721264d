"""The g-values of SynthID Text, drawn exactly as transformers draws them, and its tournament.

Dathathri et al. 2024, "Scalable watermarking for identifying large language model outputs" (Nature
634, 818-823): a token's g-value at tournament layer l is a pseudo-random bit g_l(x, r) seeded by the
token x, the H = ngram_len - 1 tokens before it (the context) and the layer's key. Tournament sampling
with m layers (one per key) draws 2^m candidates from the model and keeps, layer after layer, the one
of each pair with the larger g-value. Its outcome has a closed form (the paper's vectorized
tournament, transformers' ``update_scores``): starting from the model's probabilities p, each layer
multiplies them by 1 + g_l - E_p[g_l], so tokens with g_l = 1 gain what tokens with g_l = 0 lose.
Averaged over keys it is the model's own distribution (the paper's "non-distortionary" property).

The numbers are transformers' ``SynthIDTextWatermarkLogitsProcessor``'s:
- hashes accumulate as h <- (h + x) * 6364136223846793005 + 1 in signed 64-bit arithmetic (wrapping as
  torch's long does), from h = 1 over the context, then the token, then the layer's key;
- g = table[hash mod size], with the table ``size`` bits from ``torch.randint(0, 2)`` on a generator
  seeded with ``seed`` (defaults 2^16 and 0);
- a context whose hash is among the last ``history_size`` ones (1024; the history starts full of
  zeros) is a repeat: not watermarked, and not scored by the detector.
The table is always drawn on the CPU, so a text watermarked on any device is scored anywhere.
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache

import torch

HASH_MULTIPLIER = 6364136223846793005  # the linear congruential generator of newlib / musl
DEFAULT_NGRAM_LEN = 5
DEFAULT_TABLE_SIZE = 2**16
DEFAULT_TABLE_SEED = 0
DEFAULT_HISTORY_SIZE = 1024
MAX_TABLE_SIZE = 2**24  # transformers refuses a larger table


def accumulate_hash(hashes: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
    """Fold ``data`` [..., n] (long) into ``hashes`` [...] (long, broadcastable), one column at a time."""
    for i in range(data.shape[-1]):
        hashes = (hashes + data[..., i]) * HASH_MULTIPLIER + 1
    return hashes


@lru_cache(maxsize=4)
def sampling_table(size: int = DEFAULT_TABLE_SIZE, seed: int = DEFAULT_TABLE_SEED) -> torch.Tensor:
    """[size] long of 0 and 1 on the CPU: the bits the hashes index (a shared, read-only tensor)."""
    rng = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 2, (size,), generator=rng)


def context_hash(context: torch.Tensor) -> torch.Tensor:
    """[batch, ngram_len - 1] ids -> [batch] long: the hash of each row's context."""
    start = torch.ones(context.shape[0], dtype=torch.long, device=context.device)
    return accumulate_hash(start, context)


def with_keys(hashes: torch.Tensor, keys: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """[...] n-gram hashes -> [..., depth] g-values (long 0 or 1): each hash with each layer's key."""
    keyed = accumulate_hash(hashes[..., None], keys.to(hashes.device)[:, None])
    return table.to(hashes.device)[keyed % table.numel()]


def candidate_g_values(contexts: torch.Tensor, vocab_size: int, keys: torch.Tensor,
                       table: torch.Tensor) -> torch.Tensor:
    """[batch, ngram_len - 1] contexts -> [batch, vocab, depth]: every token's g-values after its row's context."""
    tokens = torch.arange(vocab_size, device=contexts.device)
    hashes = (context_hash(contexts)[:, None] + tokens[None, :]) * HASH_MULTIPLIER + 1
    return with_keys(hashes, keys, table)


def ngram_g_values(ids: torch.Tensor, ngram_len: int, keys: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """[seq] ids -> [seq - ngram_len + 1, depth]: the g-values of each n-gram's last token."""
    ngrams = ids.unfold(0, ngram_len, 1)
    start = torch.ones(ngrams.shape[0], dtype=torch.long, device=ids.device)
    return with_keys(accumulate_hash(start, ngrams), keys, table)


def tournament(logits: torch.Tensor, g_values: torch.Tensor) -> torch.Tensor:
    """[batch, vocab] logits, [batch, vocab, depth] g-values -> [batch, vocab] log-probabilities of the
    tournament's winner: p <- p (1 + g_l - E_p[g_l]) per layer, in transformers' order of operations.
    A token of probability 0 (cut before, or lost to rounding) comes out -inf, where transformers writes
    the dtype's lowest finite number."""
    probs = torch.softmax(logits, dim=1)
    for layer in range(g_values.shape[-1]):
        g = g_values[:, :, layer]
        g_mass = (g * probs).sum(dim=1, keepdim=True)
        probs = probs * (1 + g - g_mass)
    logprobs = torch.log(probs)
    return torch.where(torch.isfinite(logprobs), logprobs, float("-inf"))


class ContextHistory:
    """The last ``size`` context hashes, starting as ``size`` zeros (transformers' ``context_history``)."""

    def __init__(self, size: int = DEFAULT_HISTORY_SIZE) -> None:
        self.hashes: deque[int] = deque([0] * size, maxlen=size)

    def seen(self, value: int) -> bool:
        return value in self.hashes

    def push(self, value: int) -> None:
        self.hashes.appendleft(value)


def layer_weights(depth: int) -> torch.Tensor:
    """[depth] float64: the weighted-mean score's weights, falling linearly from 10 to 1 and scaled to sum
    to ``depth``, as the paper's detector_mean.py weighs them."""
    weights = torch.linspace(10, 1, depth, dtype=torch.float64)
    return weights * depth / weights.sum()
