"""Shared by the beam-family tests: a model seam with a fixed logit table, and a run-to-the-end helper."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from playground.models import Forward
from strategies.context import DecodeContext

NEVER = -30.0  # a logit whose token has probability ~1e-13 next to the others


def final(fn, lm, params, prompt_ids, max_new_tokens, seed=0, top_n=5):
    """Run a strategy to the end and return its last trace."""
    ctx = DecodeContext(lm=lm, prompt="test", prompt_ids=list(prompt_ids), seed=seed,
                        max_new_tokens=max_new_tokens, top_n=top_n)
    trace = None
    for trace in fn(ctx, params):
        pass
    return trace


@dataclass
class FakeCache:
    rows: torch.Tensor | None = None  # [batch, seq] ids so far

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        self.rows = self.rows.index_select(0, beam_idx)


class NoThinkTokenizer:
    """Just enough of a tokenizer for the phases' lookup of a thinking close: it has none."""

    unk_token_id = None

    def convert_tokens_to_ids(self, text):
        return None


@dataclass
class FakeLM:
    """A model seam with a fixed logit table: next-token logits depend on the last token only.

    The default table is random with a rare EOS, so wide beams run the whole length. Token texts
    carry HTML to check escaping.
    """

    vocab_size: int = 64
    eos_ids: frozenset = frozenset({0})
    device: torch.device = torch.device("cpu")
    key: str = "fake"
    table: torch.Tensor | None = None
    seed: int = 1
    eos_logit: float | None = -12.0  # the EOS column of a random table; None leaves it random
    tokenizer: NoThinkTokenizer = field(default_factory=NoThinkTokenizer)

    def __post_init__(self):
        if self.table is None:
            gen = torch.Generator().manual_seed(self.seed)
            self.table = torch.randn(self.vocab_size, self.vocab_size, generator=gen) * 2.0
            if self.eos_logit is not None:
                self.table[:, 0] = self.eos_logit
        self.vocab_size = self.table.shape[-1]

    def forward(self, ids: torch.Tensor, cache: FakeCache | None = None, hidden: bool = False,
                last: bool = False) -> Forward:
        cache = cache or FakeCache(ids[:, :0])
        cache.rows = torch.cat([cache.rows, ids], dim=1)
        logits = self.table[ids]
        return Forward(logits[:, -1:] if last else logits, cache)

    def piece(self, i: int) -> str:
        return f"<t{i}>"

    def decode(self, ids: list[int]) -> str:
        return "".join(self.piece(i) for i in ids)


def table_lm(rows: dict[int, dict[int, float]], vocab: int) -> FakeLM:
    """A fake model whose next-token probabilities after token t are ``rows[t]`` (token -> p); every
    other token gets a logit of NEVER, rows not given are uniform. EOS is token 0."""
    table = torch.zeros(vocab, vocab)
    for last, probs in rows.items():
        table[last] = NEVER
        for tok, p in probs.items():
            table[last, tok] = math.log(p)
    return FakeLM(table=table)


def inclusion_probability(probs: dict, target) -> float:
    """P(target is among 2 draws without replacement) = p_t + sum_{y != t} p_y p_t / (1 - p_y)."""
    p_t = probs[target]
    return p_t + sum(p * p_t / (1 - p) for y, p in probs.items() if y != target)


def check_two_draws_without_replacement(probs: dict, included, first, runs: int) -> None:
    """Over ``runs`` seeds: each sequence's inclusion frequency matches its probability of being
    among two draws without replacement, and the first draw's frequency matches p (4.5 sigma)."""
    checked = 0
    for seq, p in probs.items():
        pi = inclusion_probability(probs, seq)
        if pi > 0.02:
            checked += 1
            assert abs(included[seq] / runs - pi) <= 4.5 * math.sqrt(pi * (1 - pi) / runs), (seq, pi)
        if p > 0.02:
            assert abs(first[seq] / runs - p) <= 4.5 * math.sqrt(p * (1 - p) / runs), (seq, p)
    assert checked >= 3
