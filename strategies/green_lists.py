"""The green lists of the Kirchenbauer watermark, drawn exactly as transformers draws them.

Kirchenbauer et al. 2023, "A Watermark for Large Language Models" (ICML; arXiv:2301.10226): before
each token, a pseudo-random permutation of the vocabulary seeded by a key and the tokens before it
picks a "green list" of ``int(vocab x gamma)`` tokens. The sampler stage (strategies/sampling/
watermark.py) raises the green logits by delta; the detector (strategies/watermark_detect.py) counts
how many tokens of a text fall in their green list.

The seeds are transformers' ``WatermarkLogitsProcessor`` with its default context width of 1:
- ``lefthash`` (the paper's Algorithm 2): the previous token t seeds the list, seed = key x t;
- ``selfhash`` (Algorithm 3, "self-seeding"): a candidate token c seeds its own list, seed =
  key x (T[c] + 1)^2 with T a permutation of 1,000,003 entries drawn once from the key, the product
  taken in signed 64-bit arithmetic as torch computes it; c is green when it is in that list. With a
  context width of 1 the list depends on c alone, not on the text before it.
Each seed is reduced modulo 2^64 - 1 and seeds a fresh CPU ``torch.Generator``; the list is the first
``int(vocab x gamma)`` entries of ``torch.randperm(vocab)`` drawn from it. The lists are always drawn on
the CPU, so a text watermarked on any device is detected anywhere (transformers draws them on the
model's device, where CUDA's permutations differ from the CPU's).
"""
from __future__ import annotations

from functools import lru_cache

import torch

DEFAULT_KEY = 15485863  # transformers' default hashing key (the millionth prime)
SCHEMES = ("lefthash", "selfhash")
TABLE_SIZE = 1_000_003
SELFHASH_CANDIDATES = 40  # how many top candidates selfhash tries per step, as transformers does
_SEED_MODULUS = 2**64 - 1


def green_count(vocab_size: int, gamma: float) -> int:
    """How many tokens a green list holds: int(vocab x gamma)."""
    return int(vocab_size * gamma)


@lru_cache(maxsize=4)
def fixed_table(key: int) -> torch.Tensor:
    """selfhash's table: a permutation of range(1,000,003) drawn from a generator seeded with ``key``."""
    rng = torch.Generator(device="cpu")
    rng.manual_seed(key)
    return torch.randperm(TABLE_SIZE, generator=rng)


def _wrap_int64(value: int) -> int:
    """``value`` as a signed 64-bit product wraps (torch's long arithmetic)."""
    return (value + 2**63) % 2**64 - 2**63


def seed_of(token_id: int, key: int, scheme: str) -> int:
    """The generator seed for the list that ``token_id`` selects: the previous token (lefthash) or
    the candidate itself (selfhash)."""
    if scheme == "selfhash":
        a = int(fixed_table(key)[token_id % TABLE_SIZE]) + 1
        seed = _wrap_int64(_wrap_int64(key * a) * a)
    else:
        seed = key * token_id
    return seed % _SEED_MODULUS


@lru_cache(maxsize=256)  # 256 lists of Gemma's 262,144 tokens: 64 MiB
def _green_mask(token_id: int, vocab_size: int, gamma: float, key: int, scheme: str) -> torch.Tensor:
    rng = torch.Generator(device="cpu")
    rng.manual_seed(seed_of(token_id, key, scheme))
    green = torch.randperm(vocab_size, generator=rng)[:green_count(vocab_size, gamma)]
    return torch.zeros(vocab_size, dtype=torch.bool).index_fill_(0, green, True)


def green_mask(token_id: int, vocab_size: int, gamma: float, key: int = DEFAULT_KEY,
               scheme: str = "lefthash") -> torch.Tensor:
    """[vocab] bool on the CPU: the green list that ``token_id`` seeds (a shared, read-only tensor)."""
    return _green_mask(int(token_id), int(vocab_size), float(gamma), int(key), scheme)


@lru_cache(maxsize=65536)
def _self_green(token_id: int, vocab_size: int, gamma: float, key: int) -> bool:
    return bool(_green_mask.__wrapped__(token_id, vocab_size, gamma, key, "selfhash")[token_id])


def is_green(prev_id: int | None, token_id: int, vocab_size: int, gamma: float, key: int = DEFAULT_KEY,
             scheme: str = "lefthash") -> bool:
    """Whether ``token_id`` is green after ``prev_id`` (lefthash), or in its own list (selfhash,
    where ``prev_id`` is not read; the answer is cached per token, not the list)."""
    if scheme == "selfhash":
        return _self_green(int(token_id), int(vocab_size), float(gamma), int(key))
    if prev_id is None:
        raise ValueError("lefthash needs the token before the one scored")
    return bool(green_mask(prev_id, vocab_size, gamma, key, scheme)[token_id])
