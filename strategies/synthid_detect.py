"""Scoring SynthID Text in a token id sequence: the Mean and Weighted Mean scores of Dathathri et al. 2024,
"Scalable watermarking for identifying large language model outputs" (Nature 634, 818-823; the scoring
functions of its detector_mean.py).

Each token from the ngram_len-th on has one g-value per key (strategies/g_values.py: the n-gram it ends,
hashed with the key). Without the watermark the bits are fair coins, so the mean g-value is about 0.5;
tournament sampling raises it. Over the tokens counted (the mask) and the m layers,

    mean          = sum_t sum_l g_{t,l} / (m T)
    weighted_mean = sum_t sum_l w_l g_{t,l} / (m T),   w falling linearly from 10 to 1, scaled to sum to m.

The mask is the one transformers' ``SynthIDTextWatermarkDetector`` builds: a token is counted when its
context (the ngram_len - 1 tokens before it) is not among the last ``history_size`` contexts of the text
(``compute_context_repetition_mask``) and no end-of-sequence token came at or before it
(``compute_eos_token_mask``). The g-values and masks equal that processor's ``compute_g_values`` and the two
masks bit for bit. The ids are the text's own: the stage (strategies/sampling/synthid.py) does not read the
prompt, so neither does the detector.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Sequence

import torch

from playground.errors import InvalidRequest
from strategies.g_values import (
    DEFAULT_HISTORY_SIZE,
    DEFAULT_NGRAM_LEN,
    DEFAULT_TABLE_SEED,
    DEFAULT_TABLE_SIZE,
    ContextHistory,
    context_hash,
    layer_weights,
    ngram_g_values,
    sampling_table,
)


@dataclass(frozen=True)
class GMark:
    """One token of the sequence: ``g_values`` (one bit per layer) is None for the first ngram_len - 1
    tokens; ``counted`` is False for those and for the tokens the mask leaves out; ``mean`` and
    ``weighted_mean`` are the scores over the tokens counted up to this one (None before the first)."""

    index: int
    token_id: int
    g_values: list[int] | None
    counted: bool
    mean: float | None
    weighted_mean: float | None


@dataclass(frozen=True)
class SynthIDDetection:
    depth: int
    ngram_len: int
    scored: int  # T: tokens counted
    mean: float
    weighted_mean: float
    marks: list[GMark] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"depth": self.depth, "ngram_len": self.ngram_len, "scored": self.scored, "mean": self.mean,
                "weighted_mean": self.weighted_mean,
                "marks": [{"index": m.index, "id": m.token_id, "g_values": m.g_values, "counted": m.counted,
                           "mean": m.mean, "weighted_mean": m.weighted_mean} for m in self.marks]}


def repetition_mask(ids: torch.Tensor, ngram_len: int, history_size: int = DEFAULT_HISTORY_SIZE) -> torch.Tensor:
    """[seq] ids -> [seq - ngram_len + 1] bool: True where the n-gram's context is not a repeat."""
    contexts = ids[:-1].unfold(0, ngram_len - 1, 1)
    history = ContextHistory(history_size)
    fresh = []
    for h in context_hash(contexts).tolist():
        fresh.append(not history.seen(h))
        history.push(h)
    return torch.tensor(fresh, dtype=torch.bool)


def eos_mask(ids: torch.Tensor, eos_ids: Collection[int], ngram_len: int) -> torch.Tensor:
    """[seq] ids -> [seq - ngram_len + 1] bool: True where no end-of-sequence token came at or before the
    n-gram's last token."""
    hit = torch.tensor([int(i) in eos_ids for i in ids.tolist()], dtype=torch.bool)
    return ~hit.cummax(0).values[ngram_len - 1:] if len(hit) else hit


def mean_score(g_values: torch.Tensor, mask: torch.Tensor) -> float:
    """[T, depth] g-values, [T] mask -> the mean of the counted g-values."""
    depth = g_values.shape[-1]
    return float((g_values.double() * mask[:, None]).sum() / (depth * mask.sum()))


def weighted_mean_score(g_values: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None) -> float:
    """[T, depth] g-values, [T] mask -> their mean weighted by layer (``layer_weights`` by default)."""
    depth = g_values.shape[-1]
    w = layer_weights(depth) if weights is None else weights.double() * depth / weights.double().sum()
    return float((g_values.double() * w * mask[:, None]).sum() / (depth * mask.sum()))


def detect(ids: Sequence[int], keys: Sequence[int], ngram_len: int = DEFAULT_NGRAM_LEN,
           table_size: int = DEFAULT_TABLE_SIZE, table_seed: int = DEFAULT_TABLE_SEED,
           history_size: int = DEFAULT_HISTORY_SIZE, eos_ids: Collection[int] = ()) -> SynthIDDetection:
    """The scores of the text ``ids`` under ``keys``, per token and over the whole; see the module docstring."""
    tokens = torch.tensor([int(i) for i in ids], dtype=torch.long)
    if len(tokens) < ngram_len:
        raise InvalidRequest(f"text must hold at least ngram_len ({ngram_len}) tokens to score its first n-gram, "
                             f"got {len(tokens)} token(s)")
    g = ngram_g_values(tokens, ngram_len, torch.tensor(list(keys), dtype=torch.long),
                       sampling_table(table_size, table_seed))
    mask = repetition_mask(tokens, ngram_len, history_size) & eos_mask(tokens, eos_ids, ngram_len)
    if not mask.any():
        raise InvalidRequest("text has no token to score: every n-gram repeats an earlier context or follows "
                             "an end-of-sequence token")
    depth, w = g.shape[-1], layer_weights(g.shape[-1])
    counts = mask.long().cumsum(0)
    running = (g.double().sum(-1) * mask).cumsum(0) / (depth * counts)
    running_w = ((g.double() * w).sum(-1) * mask).cumsum(0) / (depth * counts)
    marks = [GMark(i, int(t), None, False, None, None) for i, t in enumerate(tokens[:ngram_len - 1].tolist())]
    for j, (bits, counted) in enumerate(zip(g.tolist(), mask.tolist())):
        i = j + ngram_len - 1
        started = bool(counts[j] > 0)
        marks.append(GMark(i, int(tokens[i]), bits, counted, float(running[j]) if started else None,
                           float(running_w[j]) if started else None))
    return SynthIDDetection(depth, ngram_len, int(mask.sum()), mean_score(g, mask), weighted_mean_score(g, mask),
                            marks)
