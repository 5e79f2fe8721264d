"""The watch-list: a few tokens followed at every step, whether or not they are among the recorded
candidates.

Each step records, per watched token, its probability and rank in the model's own distribution
(``raw_prob``, ``raw_rank``) and in the distribution after the whole chain (``prob``, ``rank``). A rank
is exact: 1 + the number of tokens with a strictly greater probability (tied tokens share a rank). It
costs a gather and one comparison count over the vocabulary per watched token and distribution, no sort.

An entry is a token id (digits), or text: a word counts as its first token as written after another
word (``Paris`` is the first token of `` Paris``); text that begins with neither a letter nor a digit
(``.``, ``\\n``) counts as written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from playground.trace import rnd
from strategies.params import Params, param

MAX_WATCHED = 8


@dataclass(frozen=True)
class WatchParams(Params):
    """The watch-list's one knob; its entries are checked (at most ``MAX_WATCHED``) and kept stripped."""

    watch: str = param("", f"Watch-list: up to {MAX_WATCHED} tokens or words, comma-separated (a number is a token "
                       "id; a word counts as its first token, as written after another word); every step records "
                       "their probability and rank before and after the chain. Empty = off.", noop="", brief="Tokens or words whose probability and rank every step records (up to 8).")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "watch", ", ".join(parse_watch(self.watch)))


def parse_watch(text: str) -> list[str]:
    """The entries of a watch-list, stripped, empty ones dropped; more than ``MAX_WATCHED`` is refused."""
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if len(entries) > MAX_WATCHED:
        raise InvalidRequest(f"watch must list at most {MAX_WATCHED} tokens or words, got {len(entries)} "
                             f"in {text!r:.200}")
    return entries


def watched_token(lm: LanguageModel, entry: str) -> int:
    """One entry's token id (module docstring), or InvalidRequest naming it."""
    if entry.isdigit():
        token_id = int(entry)
        if not 0 <= token_id < lm.vocab_size:
            raise InvalidRequest(f"watch: token ids must be in [0, {lm.vocab_size - 1}], got {token_id}")
        return token_id
    text = " " + entry if entry[0].isalnum() else entry
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    unk = getattr(lm.tokenizer, "unk_token_id", None)
    if not ids or (unk is not None and ids[0] == unk):
        raise InvalidRequest(f"watch: {entry!r} has no token in {lm.key}'s vocabulary")
    return int(ids[0])


def watch_ids(lm: LanguageModel, text: str) -> list[int]:
    """The watched token ids of ``text`` in order, each once."""
    return list(dict.fromkeys(watched_token(lm, e) for e in parse_watch(text)))


def watch_heading(lm: LanguageModel, ids: list[int]) -> list[dict[str, Any]]:
    """The trace's ``watch``: which tokens every step follows, ``[{id, text}]``."""
    return [{"id": i, "text": lm.piece(i)} for i in ids]


def ranks(probs: torch.Tensor, at: torch.Tensor) -> tuple[list[float], list[int]]:
    """``probs`` [vocab] at the ids ``at`` [w], and each one's rank: 1 + how many tokens are more probable."""
    picked = probs[at]
    # a - b > 0 exactly when a > b (finite floats, gradual underflow): counted as floats, since a sum
    # over booleans is not vectorised on CPU (SmolLM2's 8 x 49,152: 0.44 ms as booleans, 0.11 as floats)
    # (the count back in integers: the trace records ranks as ints, not 2.0)
    above = torch.sub(probs[None, :], picked[:, None]).gt_(0).sum(-1).long() + 1
    return picked.tolist(), above.tolist()


def watch_record(raw_probs: torch.Tensor, final_probs: torch.Tensor, at: torch.Tensor) -> list[dict[str, Any]]:
    """One step's ``watch``: per watched id (``at``), ``{raw_prob, raw_rank, prob, rank}``."""
    raw_p, raw_r = ranks(raw_probs, at)
    final_p, final_r = (raw_p, raw_r) if final_probs is raw_probs else ranks(final_probs, at)
    return [{"raw_prob": rnd(rp), "raw_rank": rr, "prob": rnd(fp), "rank": fr}
            for rp, rr, fp, fr in zip(raw_p, raw_r, final_p, final_r)]
