"""Many samples, one answer: N recorded samples of one request, an answer extracted from each, and every
answer rule's pick side by side (rules.py), with where they disagree and, given the expected answer, each
rule's accuracy against the number of samples (accuracy.py).

The samples are sample many's seeds s .. s + N - 1 (sample_records.py), CoT-decoding's branches its own
k greedy continuations of the top-k first tokens (cot_decoding.py). Every rule reads the records the
decoder wrote for each sample (step_record.py); no sample is scored again by another forward pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from playground.engine import Request
from playground.errors import InvalidRequest
from playground.models import ModelStore, Progress
from playground.whatif.accuracy import accuracy_curve, check_resamples
from playground.whatif.confidence import check_top_k, check_window
from playground.whatif.cot_decoding import cot_branches
from playground.whatif.extractors import Answer, Extractor, make_extractor
from playground.whatif.rules import (
    DEFAULT_ETA,
    DEFAULT_WINDOW,
    Pick,
    check_eta,
    cot_decoding,
    deepconf,
    disagreements,
    highest_mean_logprob,
    majority,
    verifier,
)
from playground.whatif.sample_records import Draw, Stop, draw_records
from playground.whatif.step_record import TOP_LOGPROBS, Drawn
from playground.whatif.verifiers import Verifier, check_expected, make_verifier, same_answer

DEFAULT_BRANCHES = 10  # the paper's k


@dataclass(frozen=True)
class RuleSettings:
    """The rules' knobs: DeepConf's ``window`` (tokens), ``eta`` (percent kept) and ``k`` (top log-probabilities
    per token); CoT-decoding's ``aggregate`` (pick by summed margin)."""

    window: int = DEFAULT_WINDOW
    eta: float = DEFAULT_ETA
    k: int = TOP_LOGPROBS
    aggregate: bool = False

    def __post_init__(self) -> None:
        check_window(self.window)
        check_eta(self.eta)
        check_top_k(self.k)


def sample_picks(samples: Sequence[Drawn], answers: Sequence[Answer], settings: RuleSettings,
                 passes: Verifier | None = None) -> list[Pick]:
    """The picks of the rules that read the N samples (all but CoT-decoding; the verifier with a check)."""
    picks = [majority(answers), highest_mean_logprob(samples, answers),
             deepconf(samples, answers, settings.window, settings.eta, settings.k)]
    return picks + ([verifier(samples, answers, passes)] if passes is not None else [])


def rule_pick(rule: str, samples: Sequence[Drawn], answers: Sequence[Answer], settings: RuleSettings,
              passes: Verifier | None = None) -> Pick:
    """One rule's pick (CoT-decoding: ``samples`` are its branches)."""
    if rule == "majority":
        return majority(answers)
    if rule == "mean_logprob":
        return highest_mean_logprob(samples, answers)
    if rule == "deepconf":
        return deepconf(samples, answers, settings.window, settings.eta, settings.k)
    if rule == "cot_decoding":
        return cot_decoding(samples, answers, settings.aggregate)
    if rule == "verifier" and passes is not None:
        return verifier(samples, answers, passes)
    raise InvalidRequest(f"rule must be one of majority, mean_logprob, deepconf, cot_decoding, verifier "
                         f"(with a check), got {rule!r}")


def rule_accuracy(rule: str, samples: Sequence[Drawn], answers: Sequence[Answer], expected: Sequence[str],
                  settings: RuleSettings, passes: Verifier | None = None, resamples: int = 200, seed: int = 0,
                  sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The rule's accuracy against the number of samples (accuracy.py), right when its pick is one of
    ``expected``."""
    def pick(indices: Sequence[int]) -> str | None:
        return rule_pick(rule, [samples[i] for i in indices], [answers[i] for i in indices], settings, passes).answer

    return accuracy_curve(pick, len(samples), lambda a: any(same_answer(a, e) for e in expected), resamples,
                          seed, ordered=rule == "cot_decoding", sizes=sizes)


def pool_sizes(sizes: Sequence[int] | None, pool: int) -> list[int] | None:
    """``sizes`` cut to a pool of ``pool`` samples, the pool's own size last (None: every size)."""
    if sizes is None:
        return None
    return sorted({m for m in sizes if 1 <= m < pool} | {pool})


def answers(store: ModelStore, req: Request, n: int, extract: str, verify: str | None = None,
            expected: Sequence[str] = (), branches: int = DEFAULT_BRANCHES, settings: RuleSettings = RuleSettings(),
            resamples: int = 200, progress: Progress | None = None, stop: Stop | None = None) -> dict[str, Any]:
    """Draw ``n`` samples of ``req`` and ``branches`` CoT-decoding branches (0: none), pick with every rule.
    JSON-ready: the samples with their answers and records, each rule's pick, the disagreements and,
    with ``expected``, each rule's accuracy from 1 to n samples (CoT-decoding: 1 to ``branches``)."""
    make_extractor(extract)
    check_expected(expected)
    check_resamples(resamples)
    return answers_of(store, req, draw_records(store, req, n, progress, stop), extract, verify, expected, branches,
                      settings, resamples, progress)


def answers_of(store: ModelStore, req: Request, draw: Draw, extract: str, verify: str | None = None,
               expected: Sequence[str] = (), branches: int = DEFAULT_BRANCHES, settings: RuleSettings = RuleSettings(),
               resamples: int = 200, progress: Progress | None = None,
               sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """``answers`` on samples already drawn (``draw``: a sample-many draw of ``req``, or a sweep point's kept
    samples), so the rules read the very samples a sweep measured; CoT-decoding draws its own branches.
    ``sizes``: the accuracy curve's numbers of samples (default every one from 1; each rule's pool size is
    always among them, larger ones are dropped)."""
    extractor: Extractor = make_extractor(extract)
    expected = check_expected(expected)
    resamples = check_resamples(resamples)
    samples = draw.samples
    got = [extractor(s.text) for s in samples]
    lm = store.get(req.model)
    passes = make_verifier(verify, lm) if verify else None
    picks = sample_picks(samples, got, settings, passes)
    cot = cot_branches(store, req, branches, progress)
    cot_got = [extractor(b.text) for b in cot]
    if cot:
        picks.append(cot_decoding(cot, cot_got, settings.aggregate))
    out: dict[str, Any] = {
        "model": draw.model, "strategy": draw.strategy, "params": draw.params, "prompt": req.prompt,
        "seed": req.seed, "n": len(samples), "tokens": draw.tokens, "batched": draw.batched, "extract": extract,
        "verify": verify, "expected": list(expected), "settings": settings.__dict__,
        "samples": [dict(s.to_dict(), answer=a.value, span=a.span) for s, a in zip(samples, got)],
        "branches": [dict(b.to_dict(), answer=a.value, span=a.span) for b, a in zip(cot, cot_got)],
        "picks": [p.to_dict() for p in picks], "disagreements": disagreements(picks)}
    if expected:
        out["accuracy"] = {p.rule: rule_accuracy(p.rule, cot if p.rule == "cot_decoding" else samples,
                                                 cot_got if p.rule == "cot_decoding" else got, expected, settings,
                                                 passes, resamples, req.seed,
                                                 pool_sizes(sizes, len(cot) if p.rule == "cot_decoding" else len(samples)))
                           for p in picks}
    return out
