"""The confidences two answer rules read, computed from a sample's step records (step_record.py), in float64.

DeepConf (Fu et al. 2025, "Deep Think with Confidence", arXiv 2508.15260), section 3:

- token confidence ``C_i = -(1/k) * sum_{j=1..k} log P_i(j)``, the negative mean log-probability of the k
  most likely tokens at position i under the model's own distribution (the paper reads them from the
  serving engine's top-k log-probabilities; here the step's ``top_raw_logprobs``, k at most
  ``TOP_LOGPROBS``). A peaked step has a high C (its top-1 near 0, the others far below), a flat one a low C.
  A log-probability of -inf (a token of probability 0 in float32) is left out of the mean;
- group confidence ``C_G = (1/|G|) * sum_{i in G} C_i`` over a sliding window G of ``window`` consecutive
  tokens (the paper uses 2048 tokens on long reasoning traces; windows overlap, one per end position); a
  text shorter than the window is one group;
- the trace's lowest group confidence ``min_G C_G``: the weakest stretch of the text, the paper's
  "lowest group confidence" that its offline filter ranks traces by.

CoT-decoding (Wang & Zhou 2024, "Chain-of-Thought Reasoning Without Prompting", arXiv 2402.10200),
section 2.2: a path's confidence in its answer is the mean, over the answer's tokens x_t, of
``p(x_t^1 | x_<t) - p(x_t^2 | x_<t)``, the model's top-1 minus top-2 probability at that step.
"""
from __future__ import annotations

import math
from typing import Sequence

from playground.errors import InvalidRequest
from playground.whatif.step_record import TOP_LOGPROBS, StepRecord

MAX_WINDOW = 4096


def check_top_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= TOP_LOGPROBS:
        raise InvalidRequest(f"deepconf_k must be an integer in [1, {TOP_LOGPROBS}], got {k}")
    return k


def check_window(window: int) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
        raise InvalidRequest(f"window must be an integer in [1, {MAX_WINDOW}], got {window}")
    return window


def token_confidence(step: StepRecord, k: int = TOP_LOGPROBS) -> float:
    """DeepConf's C_i of one step: the negative mean of its top-k raw log-probabilities (float64)."""
    top = [float(x) for x in step.top_raw_logprobs[:k] if x is not None and math.isfinite(x)]
    return -math.fsum(top) / len(top) if top else 0.0


def group_confidences(steps: Sequence[StepRecord], window: int, k: int = TOP_LOGPROBS) -> list[float]:
    """C_G of each window of ``window`` consecutive tokens (one group when the text is shorter)."""
    c = [token_confidence(s, k) for s in steps]
    if not c:
        return []
    w = min(window, len(c))
    return [math.fsum(c[i:i + w]) / w for i in range(len(c) - w + 1)]


def lowest_group_confidence(steps: Sequence[StepRecord], window: int, k: int = TOP_LOGPROBS) -> float | None:
    """DeepConf's lowest group confidence of a text (None: no tokens)."""
    groups = group_confidences(steps, window, k)
    return min(groups) if groups else None


def answer_margin(steps: Sequence[StepRecord], positions: Sequence[int]) -> float | None:
    """CoT-decoding's Delta: the mean top-1 minus top-2 probability over the answer's tokens ``positions``
    (None: no answer tokens). A step that recorded one candidate has margin p(top-1)."""
    margins = []
    for i in positions:
        top = steps[i].top_raw_logprobs
        p1 = math.exp(top[0]) if top else 0.0
        p2 = math.exp(top[1]) if len(top) > 1 and top[1] is not None else 0.0
        margins.append(p1 - p2)
    return math.fsum(margins) / len(margins) if margins else None


def mean_logprob(steps: Sequence[StepRecord]) -> float | None:
    """The mean log-probability of a text's tokens under the model's own distribution (None: no tokens)."""
    values = [float(s.raw_logprob) for s in steps]
    return math.fsum(values) / len(values) if values else None
