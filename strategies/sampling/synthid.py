"""SynthID Text as a sampler stage (Dathathri et al. 2024, "Scalable watermarking for identifying large
language model outputs", Nature 634, 818-823): tournament sampling over g-values, in the closed form
of the paper's vectorized tournament (strategies/g_values.py).

At every step each token's g-values come from the n-gram it would end (the run's last ngram_len - 1
tokens, then the token) hashed with each key, one key per tournament layer; the stage returns the
log-probabilities of the tournament's winner, which favour tokens with g = 1 while, averaged over keys,
the distribution stays the model's. The output equals transformers' ``SynthIDTextWatermarkLogitsProcessor``
with the same keys, ngram_len, history size and table, step by step, except that a token of
probability 0 is -inf here (cut, as every stage marks it) where transformers writes the lowest float.

As transformers does, the context is the run's own tokens, the prompt not read: the first steps see
ngram_len - 1 zeros before the first token, and a step whose context hash is among the last
``history_size`` ones (a repeated context) passes its logits through unchanged. The bits come from a
fixed table, never from the request's generator, so turning the stage on changes no other stage's draws.

Decision: ``keys``, ``ngram_len``, ``depth`` (the number of keys: tournament layers); ``repeated``
[batch]; ``g_values`` [batch, vocab, depth] (recorded per candidate, one bit per layer: the chosen
token's are its candidate's); ``g_mean`` [batch, vocab] (their mean over layers); ``g_mass_before`` and
``g_mass_after`` [batch] (the expected mean g-value of a token drawn from the logits received and
returned). ``accept`` adds ``chosen_g_mean`` and the detector's running score over the run's tokens
(strategies/synthid_detect.py): ``counted`` (whether the chosen token is scored: from the
ngram_len-th token on, a context not repeated, no end-of-sequence token so far), ``scored``, ``mean`` and
``weighted_mean`` [batch]; after the last step they are ``detect``'s on the run's tokens. Forced tokens
count too: the text holds them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from playground.seam import LanguageModel
from strategies.g_values import (
    DEFAULT_HISTORY_SIZE,
    DEFAULT_TABLE_SEED,
    DEFAULT_TABLE_SIZE,
    ContextHistory,
    candidate_g_values,
    context_hash,
    layer_weights,
    sampling_table,
    tournament,
)
from strategies.stages import Decision, Outcome, TransformBase, stage


def parse_keys(text: str) -> tuple[int, ...]:
    """'654, 400, 836' -> (654, 400, 836); the format is checked by SamplerParams (strategies/sampling/samplers.py)."""
    return tuple(int(k) for k in text.split(",") if k.strip())


@stage("synthid", params={"keys": "synthid_keys", "ngram_len": "synthid_ngram_len",
                          "history_size": "synthid_context_history_size",
                          "table_size": "synthid_sampling_table_size", "table_seed": "synthid_sampling_table_seed"},
       truncates=False, on={"synthid_keys": "654,400,836"})
@dataclass(frozen=True)
class SynthID(TransformBase):
    """Tournament sampling over the g-values of the keys (see the module docstring)."""

    keys: str
    ngram_len: int
    history_size: int = DEFAULT_HISTORY_SIZE
    table_size: int = DEFAULT_TABLE_SIZE
    table_seed: int = DEFAULT_TABLE_SEED
    eos_ids: frozenset[int] = frozenset()
    # the run so far, per row: "context" [batch, ngram_len - 1], the generation's and the detector's
    # context histories, the detector's sums; advanced by accept
    state: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_settings(cls, settings: dict[str, Any], generator: torch.Generator | None = None,
                      lm: LanguageModel | None = None) -> "SynthID":
        return cls(**settings, eos_ids=frozenset(lm.eos_ids) if lm is not None else frozenset())

    @property
    def key_tensor(self) -> torch.Tensor:
        return torch.tensor(parse_keys(self.keys), dtype=torch.long)

    def _contexts(self, batch: int) -> torch.Tensor:
        return self.state.get("context", torch.zeros(batch, self.ngram_len - 1, dtype=torch.long))

    def _histories(self, name: str, batch: int) -> list[ContextHistory]:
        if name not in self.state:
            self.state[name] = [ContextHistory(self.history_size) for _ in range(batch)]
        return self.state[name]

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        batch, vocab = logits.shape
        contexts = self._contexts(batch)
        hashes = context_hash(contexts).tolist()
        seen = self.state.get("generated")
        repeated = torch.tensor([bool(seen and seen[r].seen(h)) for r, h in enumerate(hashes)])
        g_values = candidate_g_values(contexts.to(logits.device), vocab, self.key_tensor,
                                      sampling_table(self.table_size, self.table_seed))
        out = torch.where(repeated[:, None].to(logits.device), logits, tournament(logits, g_values))
        g_mean = g_values.float().mean(-1)
        before = (logits.float().softmax(-1) * g_mean).sum(-1)
        after = (out.float().softmax(-1) * g_mean).sum(-1)
        return out, {"keys": self.keys, "ngram_len": self.ngram_len, "depth": g_values.shape[-1],
                     "repeated": repeated, "g_values": g_values, "g_mean": g_mean,
                     "g_mass_before": before, "g_mass_after": after}

    def accept(self, outcome: Outcome) -> Decision:
        chosen = outcome.chosen.cpu()
        batch = chosen.shape[0]
        contexts = self._contexts(batch)
        hashes = context_hash(contexts).tolist()
        for history, h in zip(self._histories("generated", batch), hashes):
            history.push(h)  # every step's context, repeated or not, as transformers keeps them
        g_chosen = outcome.decision["g_values"].cpu()[torch.arange(batch), chosen]  # [batch, depth]
        counted = self._score(chosen, hashes, g_chosen)
        self.state["context"] = torch.cat([contexts[:, 1:], chosen[:, None]], dim=1)
        self.state["steps"] = self.state.get("steps", 0) + 1
        sums = self.state["sums"]
        depth = g_chosen.shape[-1]
        scored = sums["scored"].clone()
        per_layer = (scored * depth).double()
        return {"chosen_g_mean": g_chosen.double().mean(-1), "counted": counted, "scored": scored,
                "mean": sums["g"].double() / per_layer, "weighted_mean": sums["weighted"] / per_layer}

    def _score(self, chosen: torch.Tensor, hashes: list[int], g_chosen: torch.Tensor) -> torch.Tensor:
        """Add the chosen tokens to the detector's sums; [batch] bool: whether each was counted."""
        batch = chosen.shape[0]
        sums = self.state.setdefault("sums", {"scored": torch.zeros(batch, dtype=torch.long),
                                              "g": torch.zeros(batch, dtype=torch.long),
                                              "weighted": torch.zeros(batch, dtype=torch.float64)})
        ended = self.state.setdefault("ended", [False] * batch)
        counted = [False] * batch
        for r in range(batch):  # an end-of-sequence token ends the scoring, wherever it comes
            ended[r] = ended[r] or int(chosen[r]) in self.eos_ids
        if self.state.get("steps", 0) >= self.ngram_len - 1:  # the detector scores whole n-grams of the text
            for r, (history, h) in enumerate(zip(self._histories("scored", batch), hashes)):
                counted[r] = not history.seen(h) and not ended[r]
                history.push(h)
        flags = torch.tensor(counted)
        weights = layer_weights(g_chosen.shape[-1])
        sums["scored"] += flags.long()
        sums["g"] += torch.where(flags, g_chosen.sum(-1), 0)
        sums["weighted"] += torch.where(flags, (g_chosen.double() * weights).sum(-1), 0.0)
        return flags
