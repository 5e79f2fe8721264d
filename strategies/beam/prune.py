"""Beam pruning after Freitag & Al-Onaizan (2017), "Beam Search Strategies for
Neural Machine Translation", section 3.

The paper first cuts the candidates of a step to the beam size, then prunes
that active candidate list C (here: the continuations that won a beam slot and
do not end). Every rule compares a candidate with the best of C:

- relative threshold r_p (on probabilities): drop c when
  P(c) <= r_p * max_{c' in C} P(c'), i.e. score(c) <= log r_p + best score;
- absolute threshold a_p (on log-probabilities): drop c when
  score(c) <= best score - a_p;
- relative local threshold r_pl, on the probability of the last token only:
  drop c when p(w_c) <= r_pl * max_{c' in C} p(w_c');
- maximum candidates per node mc: drop c when mc better-scoring candidates of
  C share its parent.

Each rule is off at 0. A pruned candidate, whichever rule removed it, leaves
its slot empty: the beam is never refilled from below, so it shrinks and
fewer hypotheses are fed to the model at the next step (the paper's "candidate
size may vary at each time step"). The best candidate of C is never pruned:
the relative, absolute and per-node rules cannot reach it anyway, and sparing
it from the local rule keeps a hypothesis to continue (the paper leaves that
case open). When several rules prune a candidate, the first in ``RULES`` order
is named.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

RELATIVE = "relative_threshold"
ABSOLUTE = "absolute_threshold"
LOCAL = "relative_local_threshold"
PER_NODE = "max_candidates_per_node"
RULES = (RELATIVE, ABSOLUTE, LOCAL, PER_NODE)


@dataclass(frozen=True)
class PruneRules:
    relative: float = 0.0  # r_p in [0, 1); 0 = off
    absolute: float = 0.0  # a_p in nats; 0 = off
    local: float = 0.0  # r_pl in [0, 1); 0 = off
    max_per_node: int = 0  # mc; 0 = off

    @property
    def active(self) -> bool:
        return bool(self.relative or self.absolute or self.local or self.max_per_node)

    def bounds(self, best_score: float, best_logprob: float) -> dict[str, float]:
        """Each active threshold as a log-space bound: a candidate at or below it is pruned.

        best_score: the best cumulative log-probability in C; best_logprob: the best last-token
        log-probability in C.
        """
        out: dict[str, float] = {}
        if self.relative > 0:
            out[RELATIVE] = math.log(self.relative) + best_score
        if self.absolute > 0:
            out[ABSOLUTE] = best_score - self.absolute
        if self.local > 0:
            out[LOCAL] = math.log(self.local) + best_logprob
        return out


@dataclass(frozen=True)
class Decision:
    status: str  # "kept" or "pruned"
    reason: str = ""  # the rule that pruned it
    threshold: float | None = None  # its log-space bound, or mc for the per-node rule


def prune(scores: list[float], logprobs: list[float], parents: list[int], rules: PruneRules) -> list[Decision]:
    """Apply the rules to the active candidate list C, given best first.

    scores: cumulative log-probabilities; logprobs: of each candidate's last token; parents: the
    hypothesis each grew from. Pure: plain lists in, one decision per candidate out.
    """
    if not scores:
        return []
    bounds = rules.bounds(scores[0], max(logprobs))
    siblings: dict[int, int] = {}  # better-scoring candidates of C seen so far, per parent
    out: list[Decision] = []
    for i, (score, logprob, parent) in enumerate(zip(scores, logprobs, parents)):
        better_siblings = siblings.get(parent, 0)
        siblings[parent] = better_siblings + 1
        verdict = None if i == 0 else _verdict(score, logprob, better_siblings, rules, bounds)
        out.append(Decision("kept") if verdict is None else Decision("pruned", *verdict))
    return out


def _verdict(score: float, logprob: float, better_siblings: int, rules: PruneRules,
             bounds: dict[str, float]) -> tuple[str, float] | None:
    """The first rule (in RULES order) that prunes a candidate, with its bound; None keeps it."""
    for rule in RULES:
        if rule == PER_NODE:
            if rules.max_per_node and better_siblings >= rules.max_per_node:
                return rule, float(rules.max_per_node)
        elif rule in bounds and (logprob if rule == LOCAL else score) <= bounds[rule]:
            return rule, bounds[rule]
    return None
