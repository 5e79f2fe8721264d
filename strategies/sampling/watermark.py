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
detector counts it (for selfhash, in its own list, wherever it ranked); and the detector's running
count over the run's tokens so far: ``scored`` and ``green_count`` [batch] and their ``z``
(strategies/watermark_detect.py ``z_score``), so the z after the last step is what ``detect`` finds on
the prompt's ids and the run's text (the prompt not scored, its last token seeding the first list).

The rule for which tokens are scored, the run's and ``detect``'s (playground/whatif/watermark.py) alike:
the text's tokens. Forced tokens count: the text holds them. An end-of-sequence token (the model's
``eos_ids``) does not, nor anything a row draws after one: it ends the run and is no part of the text,
so a detector reading the text never sees it (as SynthID's stage and detector leave it out).

With an empty context there is no previous token: nothing is biased, as transformers skips the step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from playground.seam import LanguageModel
from strategies.green_lists import SELFHASH_CANDIDATES, green_mask, is_green
from strategies.stages import Decision, Outcome, TransformBase, stage
from strategies.watermark_detect import z_score


@stage("watermark", params={"delta": "watermark_delta", "gamma": "watermark_gamma", "scheme": "watermark_scheme",
                           "key": "watermark_key"}, truncates=False, on={"watermark_delta": 2.0})
@dataclass(frozen=True)
class Watermark(TransformBase):
    """Add ``delta`` to the logits of the step's green list (see the module docstring)."""

    delta: float
    gamma: float
    scheme: str
    key: int
    eos_ids: frozenset[int] = frozenset()  # the model's end-of-sequence tokens: never scored
    # the run's "scored" and "green" so far, and whether each row has ended, [batch]: state, advanced by accept
    counts: dict[str, torch.Tensor] = field(default_factory=dict, compare=False)

    @classmethod
    def from_settings(cls, settings: dict[str, Any], generator: torch.Generator | None = None,
                      lm: LanguageModel | None = None) -> "Watermark":
        return cls(**settings, eos_ids=frozenset(lm.eos_ids) if lm is not None else frozenset())

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
        seeded = context.shape[-1] >= 1
        if seeded:
            for r, ids in enumerate(context.tolist()):
                row = self._green_row(logits[r], ids).to(logits.device)
                green[r] = row
                picked = row.nonzero().squeeze(-1)
                out[r, picked] = out[r, picked] + self.delta
        before = (logits.float().softmax(-1) * green).sum(-1)
        after = (out.float().softmax(-1) * green).sum(-1)
        return out, {"delta": self.delta, "gamma": self.gamma, "scheme": self.scheme, "key": self.key,
                     "green": green, "green_mass_before": before, "green_mass_after": after, "seeded": seeded}

    def accept(self, outcome: Outcome) -> Decision:
        vocab = outcome.received.shape[-1]
        chosen = outcome.chosen.tolist()
        if self.scheme == "selfhash":
            flags = [is_green(None, c, vocab, self.gamma, self.key, self.scheme) for c in chosen]
        else:
            flags = [bool(outcome.decision["green"][r, c]) for r, c in enumerate(chosen)]
        green = torch.tensor(flags, dtype=torch.bool)
        # lefthash scores a token only after a token that seeds its list (the step saw a context)
        seeded = self.scheme == "selfhash" or bool(outcome.decision["seeded"])
        zeros = torch.zeros(len(chosen), dtype=torch.long)
        ended = self.counts.get("ended", zeros.bool()) | torch.tensor([c in self.eos_ids for c in chosen])
        counted = (~ended).long() * int(seeded)  # [batch]: the text's tokens only (the module docstring)
        scored = self.counts.get("scored", zeros) + counted
        green_count = self.counts.get("green", zeros) + green.long() * counted
        self.counts.update(scored=scored, green=green_count, ended=ended)
        z = [z_score(int(g), int(n), self.gamma) if n else float("nan") for g, n in zip(green_count, scored)]
        return {"chosen_green": green, "scored": scored.clone(), "green_count": green_count.clone(),
                "z": torch.tensor(z, dtype=torch.float64)}
