"""The green-list watermark as a sampler stage (Kirchenbauer et al. 2023, "A Watermark for Large
Language Models", arXiv:2301.10226, the "soft red list" of its section 3).

At every step the green list of the step (strategies/green_lists.py: seeded by the key and the
previous token, or by each candidate itself) gets ``delta`` added to its logits, so green tokens
come out more often than the share ``gamma`` of the vocabulary they hold, and a detector that knows
the key finds the excess (strategies/watermark_detect.py). The output equals transformers'
``WatermarkLogitsProcessor`` with the same key, gamma, delta and scheme (context width 1), bit for bit.
The lists come from their own generators seeded by the context, never from the request's generator,
so turning the watermark on changes no other stage's draws.

- lefthash: the list seeded by the last context token gets the bias.
- selfhash: of the 40 most probable candidates (on the logits received), those in their own green
  list get the bias; a token beyond the top 40 gets none, even when its own list holds it.

Decision: ``delta``, ``gamma``, ``scheme``, ``key``; ``green`` [batch, vocab] (the tokens biased);
``green_mass_before`` and ``green_mass_after`` [batch] (their probability on the logits received and
returned). ``accept`` adds ``chosen_green`` [batch]: whether the chosen token is green as the
detector counts it (for selfhash, in its own list, wherever it ranked).

With an empty context there is no previous token: nothing is biased, as transformers skips the step.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from strategies.green_lists import SELFHASH_CANDIDATES, green_mask, is_green
from strategies.stages import Decision, Outcome, TransformBase, stage


@stage("watermark", params={"delta": "watermark_delta", "gamma": "watermark_gamma", "scheme": "watermark_scheme",
                           "key": "watermark_key"}, truncates=False)
@dataclass(frozen=True)
class Watermark(TransformBase):
    """Add ``delta`` to the logits of the step's green list (see the module docstring)."""

    delta: float
    gamma: float
    scheme: str
    key: int

    def _green_row(self, logits_row: torch.Tensor, ids: list[int]) -> torch.Tensor:
        """[vocab] bool (CPU): the tokens of one row that get the bias."""
        vocab = logits_row.shape[-1]
        if self.scheme != "selfhash":
            return green_mask(ids[-1], vocab, self.gamma, self.key, self.scheme)
        ranked = logits_row.sort(dim=-1, descending=True).indices[:SELFHASH_CANDIDATES].tolist()
        green = torch.zeros(vocab, dtype=torch.bool)
        for token in ranked:
            green[token] = is_green(None, token, vocab, self.gamma, self.key, self.scheme)
        return green

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        green = torch.zeros_like(logits, dtype=torch.bool)
        out = logits.clone()
        if context.shape[-1] >= 1:
            for r, ids in enumerate(context.tolist()):
                row = self._green_row(logits[r], ids).to(logits.device)
                green[r] = row
                picked = row.nonzero().squeeze(-1)
                out[r, picked] = out[r, picked] + self.delta
        before = (logits.float().softmax(-1) * green).sum(-1)
        after = (out.float().softmax(-1) * green).sum(-1)
        return out, {"delta": self.delta, "gamma": self.gamma, "scheme": self.scheme, "key": self.key,
                     "green": green, "green_mass_before": before, "green_mass_after": after}

    def accept(self, outcome: Outcome) -> Decision:
        vocab = outcome.received.shape[-1]
        chosen = outcome.chosen.tolist()
        if self.scheme == "selfhash":
            flags = [is_green(None, c, vocab, self.gamma, self.key, self.scheme) for c in chosen]
        else:
            flags = [bool(outcome.decision["green"][r, c]) for r, c in enumerate(chosen)]
        return {"chosen_green": torch.tensor(flags, dtype=torch.bool)}
