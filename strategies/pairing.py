"""Pairs of models that must read the same token ids: drafts and their targets, amateurs and
their experts."""
from __future__ import annotations

from typing import Any

from playground.errors import InvalidRequest


def check_shared_tokenizer(base: Any, other: Any, role: str) -> int:
    """Refuse ``other`` (a draft, an amateur) unless its token ids mean what ``base``'s do.

    Compares the whole vocabularies and the special tokens. Returns the number of logit rows
    both LM heads have: heads may be padded past the tokenizer, and padding is never produced.
    """
    if other is base:
        return base.vocab_size
    pair = f"{role} {other.key!r} does not share the tokenizer of {base.key!r}"
    vb, vo = base.tokenizer.get_vocab(), other.tokenizer.get_vocab()
    if len(vb) != len(vo):
        raise InvalidRequest(f"{pair}: {len(vo)} vs {len(vb)} tokens")
    for token, i in sorted(vo.items(), key=lambda kv: kv[1]):
        if vb.get(token) != i:
            raise InvalidRequest(f"{pair}: token {i} is {token!r} for {other.key!r} but not for {base.key!r}")
    for attr in ("bos_token_id", "eos_token_id"):
        if getattr(base.tokenizer, attr) != getattr(other.tokenizer, attr):
            raise InvalidRequest(f"{pair}: {attr} {getattr(other.tokenizer, attr)} vs "
                                 f"{getattr(base.tokenizer, attr)}")
    common = min(base.vocab_size, other.vocab_size)
    if common < len(vb):
        raise InvalidRequest(f"{pair}: an LM head of {common} rows for {len(vb)} tokens")
    return common
