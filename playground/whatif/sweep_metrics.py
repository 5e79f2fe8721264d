"""What a sweep measures at one value, from the recorded samples drawn there (step_record.py).

- ``loop_rate``: the share of samples in which the loop detector (strategies/loops.py, ``find_loops`` with
  the sweep's ``loop_repeats`` and ``loop_min_span``) finds at least one loop;
- ``distinct_1/2/3``: distinct n-grams over all n-grams of the samples' tokens, pooled over the samples
  (Li et al. 2016, "A Diversity-Promoting Objective Function for Neural Conversation Models"); None where
  the samples hold no n-gram;
- ``surprisal``, ``entropy``: the mean, over every generated token, of -log p of the chosen token and the
  entropy (nats) of the distribution it was drawn from (after the chain); ``raw_surprisal``,
  ``raw_entropy``: the same under the model's own distribution;
- ``length``: the mean number of generated tokens;
- ``modal_share``: the share of samples whose answer is the most frequent one (the extractor's answer;
  without an extractor, the text with surrounding spaces stripped); a sample without an answer counts
  against it. ``modal_answer``: that answer (ties: the first in seed order);
- ``accuracy``, with the expected answers: the share of samples whose answer is one of them.
- ``outcomes``: each distinct token sequence with its count, most frequent first.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from playground.whatif.extractors import Extractor
from playground.whatif.step_record import Drawn
from playground.whatif.verifiers import same_answer
from strategies.loops import find_loops


def distinct_n(samples: Sequence[Drawn], n: int) -> float | None:
    grams = [tuple(s.ids[i:i + n]) for s in samples for i in range(len(s.ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def mean(values: Sequence[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return math.fsum(finite) / len(finite) if finite else None


def has_loop(sample: Drawn, repeats: int, min_span: int) -> bool:
    return bool(find_loops(sample.ids, repeats, min_span))


def point_metrics(samples: Sequence[Drawn], loop_repeats: int, loop_min_span: int,
                  extractor: Extractor | None = None, expected: Sequence[str] = ()) -> dict[str, Any]:
    """The measures of one sweep value (module docstring)."""
    n = len(samples)
    steps = [st for s in samples for st in s.steps]
    answers = [extractor(s.text).value if extractor else s.text.strip() for s in samples]
    counts: dict[str, int] = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    modal = max(counts, key=lambda a: counts[a]) if counts else None  # max keeps the first of a tie
    outcomes: dict[tuple[int, ...], int] = {}
    for s in samples:
        outcomes[tuple(s.ids)] = outcomes.get(tuple(s.ids), 0) + 1
    text_of = {tuple(s.ids): s.text for s in samples}
    out: dict[str, Any] = {
        "n": n,
        "loop_rate": sum(has_loop(s, loop_repeats, loop_min_span) for s in samples) / n if n else None,
        "distinct_1": distinct_n(samples, 1), "distinct_2": distinct_n(samples, 2), "distinct_3": distinct_n(samples, 3),
        "surprisal": mean([-st.logprob for st in steps]), "entropy": mean([st.entropy for st in steps]),
        "raw_surprisal": mean([-st.raw_logprob for st in steps]), "raw_entropy": mean([st.raw_entropy for st in steps]),
        "length": sum(len(s.ids) for s in samples) / n if n else None,
        "modal_answer": modal, "modal_share": counts[modal] / n if modal is not None else 0.0,
        "answers": answers,
        "outcomes": [{"ids": list(ids), "text": text_of[ids], "count": c}
                     for ids, c in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0]))]}
    if expected:
        out["accuracy"] = sum(any(same_answer(a, e) for e in expected) for a in answers) / n if n else None
    return out
