"""The sampler stages' registry: each stage of a chain declared once, on its class, with ``@stage``.

    @stage("top_k", params={"k": "top_k"}, truncates=True)
    @dataclass(frozen=True)
    class TopK(TransformBase):
        k: int
        ...

``params`` maps the class's fields to the request parameters they are read from (fields of
``SamplerParams`` or ``ChainParams``, where ``param()`` states each one's range and no-op value).
From that one declaration:

- a stage is on when any of its parameters that has a no-op value is away from it (``is_on``); a
  stage whose parameters have none (the grammar) is never built from parameters;
- it is built from the parameters' values (``build``: the class's ``from_settings``, which a stage
  overrides when it needs the request's generator or model);
- whether it truncates (removes tokens) is written into its trace record (``strategies.recording``),
  where charts and warnings read it.

The registry holds no stage itself: the stage modules (strategies/sampling/) fill it when imported.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class StageSpec:
    name: str
    cls: type
    params: dict[str, str]  # the class's field -> the request parameter it takes
    truncates: bool

    def settings(self, p: Any) -> dict[str, Any]:
        """The class's fields' values read from parameters ``p``."""
        return {field: getattr(p, name) for field, name in self.params.items()}

    def switches(self, p: Any) -> dict[str, Any]:
        """The stage's parameters of ``p`` that have a no-op value, each with it."""
        meta = {f.name: f.metadata for f in dataclasses.fields(p)}
        return {name: meta[name]["noop"] for name in self.params.values()
                if name in meta and meta[name].get("noop") is not None}

    def is_on(self, p: Any) -> bool:
        """Whether ``p`` turns the stage on: any of its parameters away from its no-op value."""
        return any(getattr(p, name) != noop for name, noop in self.switches(p).items())

    def build(self, p: Any, generator: Any = None, lm: Any = None) -> Any:
        """A fresh stage object for one run, from ``p`` (``generator``, ``lm``: for the stages that need them)."""
        return self.cls.from_settings(self.settings(p), generator, lm)


STAGES: dict[str, StageSpec] = {}


def stage(name: str, *, params: dict[str, str] | None = None, truncates: bool) -> Callable[[T], T]:
    """Register a stage class under ``name`` (its name in a chain's order and in the trace)."""
    def wrap(cls: T) -> T:
        if name in STAGES:
            raise RuntimeError(f"stage {name!r} registered twice")
        cls.name = name
        cls.truncates = truncates
        STAGES[name] = StageSpec(name, cls, dict(params or {}), truncates)
        return cls
    return wrap


def truncates(name: str) -> bool:
    """Whether the stage recorded as ``name`` removes tokens (False for names no stage registered:
    "raw", a beam's or a strategy's own record)."""
    spec = STAGES.get(name)
    return bool(spec and spec.truncates)


def stages_on(p: Any, names: list[str] | tuple[str, ...]) -> list[str]:
    """Of ``names``, the registered stages that parameters ``p`` turn on, in that order."""
    return [n for n in names if n in STAGES and STAGES[n].params and STAGES[n].is_on(p)]
