"""What speculative decoding should buy: Leviathan et al. (2022), section 3.

The ``speculative`` strategy records the expected-speedup curve it computes
here (under ``timing``, since it rests on measured costs); the speed chart
draws that record, and the benchmark prints the same numbers.
"""
from __future__ import annotations

from typing import Any


def expected_tokens(alpha: float, gamma: float) -> float:
    """Tokens one round yields on average when each draft passes i.i.d. with probability alpha:
    (1 - alpha^(gamma+1)) / (1 - alpha) (Leviathan et al. 2022, eq. 1); gamma + 1 at alpha = 1."""
    return gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: float, c: float, verify_cost: float = 1.0) -> float:
    """Leviathan et al. (2022), Theorem 3.8: expected wall-clock improvement factor.

    A round costs gamma draft steps (c each, in target steps) plus one verification pass. The paper
    takes that pass to cost one target step; ``verify_cost`` is its measured cost in target steps (on
    a CPU, verifying 8 tokens costs about two steps).
    """
    return expected_tokens(alpha, gamma) / (gamma * c + verify_cost)


def break_even_alpha(gamma: int, c: float, verify_cost: float) -> float:
    """The alpha at which ``expected_speedup`` reaches 1 (bisection); 1.0 when even gamma + 1 tokens a
    round cannot pay for gamma c + verify_cost."""
    if expected_speedup(1.0, gamma, c, verify_cost) < 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_speedup(mid, gamma, c, verify_cost) < 1 else (lo, mid)
    return hi


def expected_curve(alpha: float, c: float, verify_cost: dict[int, float], gammas: range) -> dict[str, list[Any]]:
    """The expected speedup at each gamma of ``gammas``: with the paper's one-step verification, and
    with the measured cost of verifying gamma + 1 tokens (``verify_cost`` maps tokens verified to
    target steps) where one was measured."""
    measured = [g for g in gammas if g + 1 in verify_cost]
    return {"gamma": list(gammas),
            "verify_one_step": [expected_speedup(alpha, g, c) for g in gammas],
            "measured_gamma": measured,
            "measured_verify": [expected_speedup(alpha, g, c, verify_cost[g + 1]) for g in measured]}
