"""A rule's accuracy against the number of samples it is given, from one pool of N recorded samples.

For m = 1 .. N the rule is run on ``resamples`` subsets of m of the N samples, each drawn without
replacement by a ``random.Random(seed)`` (m = N: the one whole pool), and the accuracy is the share of
those subsets whose pick the checker accepts. The interval is Wilson's 95% score interval on that share
over the subsets: the spread of the resampling, which does not count the pool's own luck (a fresh pool
of N samples would move every point together). A rule that reads its own branches in a fixed order
(CoT-decoding) is given the first m, once.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

from playground.errors import InvalidRequest

MAX_RESAMPLES = 10_000
Z95 = 1.959963984540054


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a binomial share (Wilson 1927); (0, 1) with no trials."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def check_resamples(resamples: int) -> int:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or not 1 <= resamples <= MAX_RESAMPLES:
        raise InvalidRequest(f"resamples must be an integer in [1, {MAX_RESAMPLES}], got {resamples}")
    return resamples


def accuracy_curve(pick: Callable[[Sequence[int]], Any], n: int, correct: Callable[[Any], bool],
                   resamples: int = 200, seed: int = 0, ordered: bool = False,
                   sizes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """``pick(indices)``: the rule's answer on those samples; ``correct(answer)``: the checker. One point per
    size m in ``sizes`` (default 1 .. n): ``{n, accuracy, low, high, subsets}``."""
    resamples = check_resamples(resamples)
    rng = random.Random(seed)
    points = []
    for m in sizes or range(1, n + 1):
        if not 1 <= m <= n:
            raise InvalidRequest(f"a resampled size must be in [1, {n}], got {m}")
        subsets = [list(range(m))] if ordered or m == n else [sorted(rng.sample(range(n), m)) for _ in range(resamples)]
        hits = sum(bool(correct(pick(s))) for s in subsets)
        low, high = wilson(hits, len(subsets))
        points.append({"n": m, "accuracy": hits / len(subsets), "low": low, "high": high, "subsets": len(subsets)})
    return points
