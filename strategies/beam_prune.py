"""Beam pruning after Freitag & Al-Onaizan (2017), "Beam Search Strategies for
Neural Machine Translation", section 3.

Every step of a beam search ranks a pool of candidates by cumulative
log-probability. Pruning removes candidates from the beam that are far worse
than the best candidate of the pool, so the beam shrinks and fewer
hypotheses are fed to the model at the next step:

- relative threshold r_p (on probabilities, as in the paper): drop c when
  P(c) <= r_p * P(best), i.e. score(c) <= log r_p + score(best);
- absolute threshold a_p (on log-probabilities): drop c when
  score(c) <= score(best) - a_p;
- relative local threshold r_pl: the same test as r_p on the probability of
  the last token only: p(w_c) <= r_pl * max over the pool of p(w);
- maximum candidates per node mc: at most mc candidates that share a parent
  enter the beam; a candidate over the limit gives its slot to the next one.

Each rule is off at 0. The best running candidate of a step is never pruned,
so the search always has a hypothesis to continue. A candidate removed by a
threshold still uses its beam slot (the beam shrinks rather than admitting
worse candidates), which is what makes the thresholds save work.
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

        best_score: the pool's best cumulative log-probability; best_logprob: the pool's best
        last-token log-probability.
        """
        out: dict[str, float] = {}
        if self.relative > 0:
            out[RELATIVE] = math.log(self.relative) + best_score
        if self.absolute > 0:
            out[ABSOLUTE] = best_score - self.absolute
        if self.local > 0:
            out[LOCAL] = math.log(self.local) + best_logprob
        return out


def threshold_verdict(score: float, logprob: float, bounds: dict[str, float]) -> tuple[str, float] | None:
    """The first threshold rule (in RULES order) that prunes a candidate, with its bound; None keeps it."""
    for rule, bound in bounds.items():
        value = logprob if rule == LOCAL else score
        if value <= bound:
            return rule, bound
    return None


@dataclass(frozen=True)
class Decision:
    status: str  # "kept", "pruned" or "fell_off"
    reason: str = ""
    threshold: float | None = None


def select_running(scores: list[float], logprobs: list[float], parents: list[int], stops: list[bool],
                   num_beams: int, rules: PruneRules, bounds: dict[str, float]) -> list[Decision | None]:
    """Decide, for a pool sorted best first, which candidates continue in the beam.

    Candidates that end a hypothesis (``stops``) get None: the finished-set logic owns them.
    The others fill at most ``num_beams`` slots in pool order; see the module docstring for
    how the rules act. Pure: plain lists in, one decision per candidate out.
    """
    out: list[Decision | None] = []
    used = 0
    children: dict[int, int] = {}
    for score, logprob, parent, stop in zip(scores, logprobs, parents, stops):
        if stop:
            out.append(None)
            continue
        if used == num_beams:
            out.append(Decision("fell_off", f"ranked below the {num_beams} beams"))
            continue
        if rules.max_per_node and children.get(parent, 0) >= rules.max_per_node:
            out.append(Decision("pruned", PER_NODE, float(rules.max_per_node)))
            continue
        children[parent] = children.get(parent, 0) + 1
        first = used == 0
        used += 1
        verdict = None if first else threshold_verdict(score, logprob, bounds)
        out.append(Decision("kept") if verdict is None else Decision("pruned", *verdict))
    return out
