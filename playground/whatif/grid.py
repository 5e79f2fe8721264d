"""A sweep's parameter and values: one numeric parameter of the strategy, up to ``MAX_POINTS`` values.

Values are written as a list (``0.2,0.5,1``) or a grid: ``lin:LOW:HIGH:COUNT`` (COUNT values evenly spaced
from LOW to HIGH, both included) or ``log:LOW:HIGH:COUNT`` (evenly spaced in log, LOW > 0). An integer
parameter (top_k, num_beams, gamma) takes each grid value rounded to the nearest integer, repeats dropped.
Every value is checked against the parameter's declared range before anything runs.
"""
from __future__ import annotations

import dataclasses
import math

from playground.errors import InvalidRequest
from strategies.params import field_kind
from strategies.registry import get_strategy

MAX_POINTS = 12
MAX_VALUES_CHARS = 1000


def sweepable(strategy: str) -> list[str]:
    """The strategy's parameters a sweep can vary: its int and float ones."""
    return [f.name for f in dataclasses.fields(get_strategy(strategy).params) if field_kind(f) in (int, float)]


def check_param(strategy: str, name: str) -> type:
    """The kind (int or float) of ``strategy``'s parameter ``name``; anything else is refused."""
    allowed = sweepable(strategy)
    if name not in allowed:
        raise InvalidRequest(f"param must be one of {strategy}'s numeric parameters ({', '.join(allowed)}), "
                             f"got {name!r:.100}")
    return next(field_kind(f) for f in dataclasses.fields(get_strategy(strategy).params) if f.name == name)


def parse_number(text: str, what: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        raise InvalidRequest(f"{what} must be a finite number, got {text!r:.100}")
    return x


def parse_values(text: str) -> list[float]:
    """``0.2,0.5,1`` or ``lin:0.1:1.5:8`` or ``log:0.01:1:5`` -> the values, in the order written."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_VALUES_CHARS:
        raise InvalidRequest(f"values must be a list like 0.2,0.5,1 or a grid lin:LOW:HIGH:COUNT or "
                             f"log:LOW:HIGH:COUNT (at most {MAX_VALUES_CHARS} characters), got {text!r:.100}")
    kind, _, rest = text.strip().partition(":")
    if kind not in ("lin", "log"):
        values = [parse_number(v.strip(), "a sweep value") for v in text.split(",")]
    else:
        parts = rest.split(":")
        if len(parts) != 3:
            raise InvalidRequest(f"a grid must be {kind}:LOW:HIGH:COUNT, got {text!r:.100}")
        low, high = parse_number(parts[0], "the grid's low end"), parse_number(parts[1], "the grid's high end")
        count = parse_number(parts[2], "the grid's count")
        if not count.is_integer() or not 1 <= count <= MAX_POINTS:
            raise InvalidRequest(f"the grid's count must be an integer in [1, {MAX_POINTS}], got {parts[2]}")
        if kind == "log" and (low <= 0 or high <= 0):
            raise InvalidRequest(f"a log grid's ends must be > 0, got {parts[0]} and {parts[1]}")
        values = grid(kind, low, high, int(count))
    if not 1 <= len(values) <= MAX_POINTS:
        raise InvalidRequest(f"a sweep takes 1 to {MAX_POINTS} values, got {len(values)}")
    return values


def grid(kind: str, low: float, high: float, count: int) -> list[float]:
    if count == 1:
        return [low]
    if kind == "lin":
        return [low + (high - low) * i / (count - 1) for i in range(count)]
    a, b = math.log(low), math.log(high)
    return [math.exp(a + (b - a) * i / (count - 1)) for i in range(count)]


def sweep_values(strategy: str, name: str, values: list[float], base: dict) -> list[int | float]:
    """The values as the parameter takes them (integers rounded, repeats dropped), each checked against
    its declared range together with the other ``base`` parameters."""
    kind = check_param(strategy, name)
    out: list[int | float] = []
    for v in values:
        x: int | float = int(round(v)) if kind is int else float(v)
        if x not in out:
            out.append(x)
    params = get_strategy(strategy).params
    for x in out:
        params.from_dict({**base, name: x})
    return out
