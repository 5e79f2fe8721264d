"""Rules that pick one answer out of N samples, each from what the samples recorded (step_record.py).

Every rule sees the samples in seed order, each with its extracted answer (extractors.py; None: the text
gives none) and returns a ``Pick``: the answer, the sample that stands for it where the rule picks a
sample, the votes per answer behind it and the rule's score of every sample. A sample without an answer
never wins; where no sample has one, the pick is None. Ties go to the answer (or sample) that comes first
in seed order, so a rule's pick is a function of the samples alone.

- ``majority``: self-consistency (Wang et al. 2022, "Self-Consistency Improves Chain of Thought
  Reasoning in Language Models"): the most frequent answer; votes are counts.
- ``mean_logprob``: the sample whose tokens have the highest mean log-probability under the model's own
  distribution; votes are each answer's best mean. (vLLM dropped ``best_of``, which ranked by the
  cumulative log-probability, because likelihood is not quality: this rule shows how it fares.)
- ``deepconf``: DeepConf offline (Fu et al. 2025, arXiv 2508.15260, section 3.2): every sample's lowest
  group confidence (confidence.py, its sliding ``window`` a parameter); the filter keeps the top ``eta``
  percent of the samples by it (ceil(eta/100 * N), at least one; the paper's DeepConf-low keeps 10%,
  DeepConf-high 90%); then the confidence-weighted vote V(a) = sum of the kept samples' confidences
  whose answer is a, and the answer with the largest V.
- ``cot_decoding``: CoT-decoding (Wang & Zhou 2024, arXiv 2402.10200) on its own branches (cot_decoding.py:
  the top-k first tokens, each continued greedily): the branch whose answer tokens have the largest mean
  top-1 minus top-2 probability margin; votes are the paper's aggregated form, each answer's summed
  margin over the branches (with ``aggregate``, that sum picks).
- ``verifier``: the first sample whose text passes a check (verifiers.py: an exact answer, a regex, a JSON
  schema through the grammar's matcher); votes count the passing samples per answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from playground.errors import InvalidRequest
from playground.whatif.confidence import answer_margin, check_top_k, check_window, lowest_group_confidence, mean_logprob
from playground.whatif.extractors import Answer
from playground.whatif.step_record import TOP_LOGPROBS, Drawn

RULES = ("majority", "mean_logprob", "deepconf", "cot_decoding", "verifier")
DEFAULT_WINDOW = 16  # tokens: the texts here are short (at most 64 tokens); the paper's traces are long
DEFAULT_ETA = 90.0  # DeepConf-high


@dataclass
class Pick:
    rule: str
    answer: str | None
    sample: int | None = None  # the index of the sample (or branch) that stands for the answer
    votes: dict[str, float] = field(default_factory=dict)
    scores: list[float | None] = field(default_factory=list)  # per sample, the rule's score
    kept: list[bool] | None = None  # DeepConf's filter

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"rule": self.rule, "answer": self.answer, "sample": self.sample,
                             "votes": dict(self.votes), "scores": list(self.scores)}
        if self.kept is not None:
            d["kept"] = list(self.kept)
        return d


def first_best(votes: dict[str, float]) -> str | None:
    """The answer with the most votes; a tie goes to the one listed first (dicts keep insertion order)."""
    best: str | None = None
    for answer, v in votes.items():
        if best is None or v > votes[best]:
            best = answer
    return best


def majority(answers: Sequence[Answer]) -> Pick:
    votes: dict[str, float] = {}
    for a in answers:
        if a.value is not None:
            votes[a.value] = votes.get(a.value, 0) + 1
    return Pick("majority", first_best(votes), None, votes, [1.0 if a.value is not None else None for a in answers])


def best_sample(rule: str, answers: Sequence[Answer], scores: Sequence[float | None]) -> Pick:
    """The answered sample with the highest score (ties: the first); votes are each answer's best score."""
    votes: dict[str, float] = {}
    best: int | None = None
    for i, (a, s) in enumerate(zip(answers, scores)):
        if a.value is None or s is None:
            continue
        votes[a.value] = max(votes.get(a.value, -math.inf), s)
        if best is None or s > scores[best]:  # type: ignore[operator]
            best = i
    return Pick(rule, None if best is None else answers[best].value, best, votes, list(scores))


def highest_mean_logprob(samples: Sequence[Drawn], answers: Sequence[Answer]) -> Pick:
    return best_sample("mean_logprob", answers, [mean_logprob(s.steps) for s in samples])


def check_eta(eta: float) -> float:
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not 0 < eta <= 100:
        raise InvalidRequest(f"eta must be a percentage in (0, 100], got {eta}")
    return float(eta)


def deepconf(samples: Sequence[Drawn], answers: Sequence[Answer], window: int = DEFAULT_WINDOW,
             eta: float = DEFAULT_ETA, k: int = TOP_LOGPROBS) -> Pick:
    window, eta, k = check_window(window), check_eta(eta), check_top_k(k)
    conf = [lowest_group_confidence(s.steps, window, k) for s in samples]
    ranked = [i for i in sorted(range(len(samples)), key=lambda i: (-conf[i], i)) if conf[i] is not None]  # type: ignore[operator]
    keep = set(ranked[:max(1, math.ceil(eta / 100 * len(samples) - 1e-9))])
    votes: dict[str, float] = {}
    for i, a in enumerate(answers):
        if i in keep and a.value is not None:
            votes[a.value] = votes.get(a.value, 0.0) + float(conf[i])  # type: ignore[arg-type]
    return Pick("deepconf", first_best(votes), None, votes, list(conf), [i in keep for i in range(len(samples))])


def cot_decoding(branches: Sequence[Drawn], answers: Sequence[Answer], aggregate: bool = False) -> Pick:
    margins = [None if a.span is None else answer_margin(b.steps, b.tokens_of_span(*a.span))
               for b, a in zip(branches, answers)]
    pick = best_sample("cot_decoding", answers, margins)
    sums: dict[str, float] = {}
    for a, m in zip(answers, margins):
        if a.value is not None and m is not None:
            sums[a.value] = sums.get(a.value, 0.0) + m
    pick.votes = sums
    if aggregate:
        pick.answer = first_best(sums)
        pick.sample = next((i for i, a in enumerate(answers) if a.value == pick.answer), None)
    return pick


def verifier(samples: Sequence[Drawn], answers: Sequence[Answer], passes: Callable[[Drawn, Answer], bool]) -> Pick:
    ok = [passes(s, a) for s, a in zip(samples, answers)]
    votes: dict[str, float] = {}
    for a, good in zip(answers, ok):
        if good and a.value is not None:
            votes[a.value] = votes.get(a.value, 0) + 1
    first = next((i for i, (a, good) in enumerate(zip(answers, ok)) if good and a.value is not None), None)
    return Pick("verifier", None if first is None else answers[first].value, first, votes,
                [1.0 if good else 0.0 for good in ok])


def disagreements(picks: Sequence[Pick]) -> dict[str, Any]:
    """Where the rules part: each answer picked, with the rules that picked it; ``agree`` when one answer
    (no answer counts as one) was picked by every rule."""
    by_answer: dict[str, list[str]] = {}
    for p in picks:
        by_answer.setdefault("(none)" if p.answer is None else p.answer, []).append(p.rule)
    return {"agree": len(by_answer) <= 1, "answers": by_answer}
