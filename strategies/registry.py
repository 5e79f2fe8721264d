"""The single list of strategies, filled by the ``@register`` decorator.

A strategy is a generator function ``run(ctx, params) -> Iterator[Trace]``
that yields the growing trace after every token it commits (so callers can
stream, and stop it between yields by closing the generator), plus a frozen
``Params`` dataclass from which CLI flags and UI controls are derived.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from playground.errors import InvalidRequest
from strategies.params import Params


def no_reference(params: Any) -> list | None:
    return None


@dataclass(frozen=True)
class Draws:
    """How sample many (playground/whatif/sample_many.py) draws a strategy's runs and what it tests them against.

    reference: ``params`` -> the transforms whose chained distribution each token is drawn from exactly (the
      exact reference its outcomes are enumerated under), or None where there is none;
    reference_name: that reference in words;
    selector: ``generator`` -> the selector of one batched row, where the runs can be drawn as rows of one
      decode (only with a reference, but greedy's); None: one run per seed;
    run_params: set on every one-by-one run (what changes no token and costs time);
    finished_set: a run's outcomes are its finished hypotheses (k sequences), not its text;
    refusal: why sample many refuses the strategy ("" where it does not).
    """

    reference: Callable[[Any], list | None] = no_reference
    reference_name: str = "the chained distribution the selector draws from"
    selector: Callable[[Any], Any] | None = None
    run_params: dict[str, Any] = field(default_factory=dict)
    finished_set: bool = False
    refusal: str = ""


@dataclass(frozen=True)
class StrategySpec:
    name: str
    params: type[Params]
    run: Callable[..., Iterator[Any]]
    summary: str
    family: str  # one of FAMILY_ORDER, the folder of strategies/ it lives in
    forceable: bool = False  # each step commits one token, so a token can be forced (strategies/forcing.py)
    draws: Draws = Draws()  # how sample many draws it
    rows: tuple[str, ...] = ()  # the parameters whose product is the rows a step runs through the model (none: 1)

    def row_factors(self, params: Any) -> tuple[tuple[str, int], ...]:
        """(parameter, value) for each factor of the rows one step of a run with ``params`` runs through the
        model: beams, prefixes; empty for a strategy that runs one row a step. The time budget's row cap,
        the ZeroGPU duration and the page's estimate all read this."""
        return tuple((name, int(getattr(params, name))) for name in self.rows)


REGISTRY: dict[str, StrategySpec] = {}


def register(name: str, params: type[Params], summary: str, family: str = "sampling", *, forceable: bool = False,
             draws: Draws | None = None, rows: tuple[str, ...] = ()):
    """Register a strategy's generator function under ``name``, with the facts the rest of the code reads off it."""
    def wrap(fn: Callable[..., Iterator[Any]]):
        if name in REGISTRY:
            raise RuntimeError(f"strategy {name!r} registered twice")
        fields = {f.name for f in dataclasses.fields(params)}
        if not set(rows) <= fields:
            raise RuntimeError(f"strategy {name!r} names rows {sorted(set(rows) - fields)} its params lack")
        REGISTRY[name] = StrategySpec(name, params, fn, summary, family, forceable, draws or Draws(), tuple(rows))
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
