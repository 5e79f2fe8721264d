"""The single list of strategies, filled by the ``@register`` decorator.

A strategy is a generator function ``run(ctx, params) -> Iterator[Trace]``
that yields the growing trace after every token it commits (so callers can
stream, and stop it between yields by closing the generator), plus a frozen
``Params`` dataclass from which CLI flags and UI controls are derived.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from playground.errors import InvalidRequest
from strategies.params import Params


@dataclass(frozen=True)
class StrategySpec:
    name: str
    params: type[Params]
    run: Callable[..., Iterator[Any]]
    summary: str
    family: str  # "sampling", "beam", "speculative", "contrastive"


REGISTRY: dict[str, StrategySpec] = {}


def register(name: str, params: type[Params], summary: str, family: str = "sampling"):
    def wrap(fn: Callable[..., Iterator[Any]]):
        if name in REGISTRY:
            raise RuntimeError(f"strategy {name!r} registered twice")
        REGISTRY[name] = StrategySpec(name, params, fn, summary, family)
        return fn
    return wrap


def get_strategy(name: str) -> StrategySpec:
    import strategies  # noqa: F401  (imports every strategy module, which registers it)
    if name not in REGISTRY:
        raise InvalidRequest(f"strategy must be one of {', '.join(sorted(REGISTRY))}, got {name!r}")
    return REGISTRY[name]


FAMILY_ORDER = ("sampling", "beam", "contrastive", "speculative")  # the one place the order is written


def all_strategies() -> list[StrategySpec]:
    """Every strategy by FAMILY_ORDER, greedy leading; registration order within a family."""
    import strategies  # noqa: F401
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    return sorted(REGISTRY.values(), key=lambda s: (rank.get(s.family, len(rank)), s.name != "greedy"))
