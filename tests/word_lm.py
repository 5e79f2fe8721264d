"""Shared by the sampler and chart tests: just enough of the model seam for make_step, DRY, word bias and
SynthID (its end-of-sequence ids)."""
from __future__ import annotations


class WordLM:
    """Token ``i``'s text is ``form.format(i)``; the tokenizer maps words '<letter><id>' back to ids."""

    key = "fake"
    eos_ids: frozenset[int] = frozenset()
    eos_ids: frozenset[int] = frozenset()

    def __init__(self, form: str = " w{}"):
        self.form = form

    def piece(self, token_id: int) -> str:
        return self.form.format(token_id)

    class tokenizer:  # stands in for a tokenizer object
        unk_token_id = None

        def __new__(cls, text: str, add_special_tokens: bool = False):
            return {"input_ids": [int(w[1:]) for w in text.split()]}
