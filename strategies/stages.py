"""The sampler stages: their contract (``TransformBase``, read it first, as one reads transformers'
``LogitsProcessor``) and their registry, each stage of a chain declared once, on its class, with ``@stage``.

    @stage("top_k", params={"k": "top_k"}, truncates=True, on={"top_k": 5})
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
- ``on`` gives request parameters that switch the stage on (an example, not a default): the tests
  switch every stage on from it (the chain orders, the chart-truth property, every stage's mark
  text) and so does the trace snapshot (``on_values``), so a new stage is covered where it is declared;
- whether it truncates (removes tokens) is written into its trace record (``strategies.recording``),
  where charts and warnings read it;
- a stage built directly (``MinP(1.05)``, as sample many and the tools build them) is checked in its
  constructor against the same declarations (``declare``: the parameter classes register their fields),
  so a value a request would refuse raises the request's ``InvalidRequest`` (a ValueError) there too.

The registry holds no stage itself: the stage modules (strategies/sampling/) fill it when imported.
It sits at the strategies' root, below the families, so that the recorder can read it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch

from playground.seam import LanguageModel
from strategies.params import check_value, field_kind

Decision = dict[str, Any]


class TransformBase:
    """One stage of a chain: a small object that makes one decision on the distribution it receives.

    Shapes: ``logits`` is ``[batch, vocab]`` float, ``context`` is ``[batch, seq]`` long (every token
    so far, prompt included). A stage never modifies its input, and keeps at least one token: the
    most probable one, except for typical-p (the most typical one, as transformers keeps) and XTC
    (the least probable of its top tokens); see strategies/sampling/truncations.py.

    A subclass is registered with ``@stage`` (strategies/stages.py: its name, the request parameters
    it reads, whether it truncates) and implements ``decide``. Its life cycle in a run, as llama.cpp's
    sampler interface has it:

    - built fresh for each run (``from_settings``: the class's fields from the request's parameters;
      a stage that needs the request's generator or model overrides it), so state lives with one run;
    - ``decide(logits, context) -> (new_logits, decision)`` at every step: the decision from the
      logits and the state the stage holds, which it reads and does not change (XTC draws its coin
      from the request's generator, the one state passed in);
    - ``accept(outcome)`` once the token is chosen, ``outcome.forced`` saying whether it was forced
      rather than drawn: a stateful stage (mirostat, adaptive-p, XTC's coin) advances its state there,
      and returns what it learned, added to its record of the step. The base accepts and learns nothing.

    ``apply`` is ``decide`` with the decision dropped: one computation, never two, so the recorded
    decision is by construction the one that produced the logits. A decision is a dict of plain
    numbers (the stage's settings), ``[batch]`` tensors (one value per row) and ``[batch, vocab]``
    tensors (one value per token); the recorder turns it into JSON for the step's candidates
    (``strategies.recording.decision_record``).
    """

    name: str  # set by @stage (whether it truncates is the registry's: STAGES[name].truncates)

    def __post_init__(self) -> None:
        """Check each numeric field against the range of the request parameter it is read from (run by the
        dataclass's ``__init__``; a stage that defines its own ``__post_init__`` calls this one first)."""
        spec = STAGES.get(getattr(type(self), "name", ""))
        for field, name in (spec.params if spec is not None else {}).items():
            declared = DECLARED.get(name)
            if declared is not None and field_kind(declared) in (int, float) and hasattr(self, field):
                value = check_value(name, getattr(self, field), declared.metadata, field_kind(declared))
                object.__setattr__(self, field, value)

    @classmethod
    def from_settings(cls, settings: dict[str, Any], generator: torch.Generator | None = None,
                      lm: LanguageModel | None = None) -> "TransformBase":
        """The stage for one run: ``settings`` are its fields' values (read from the request's parameters)."""
        return cls(**settings)

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        raise NotImplementedError

    def apply(self, logits: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        return self.decide(logits, context)[0]

    def accept(self, outcome: "Outcome") -> Decision:
        """The chosen token: advance the stage's state (a stateful stage) and return what it learned."""
        return {}


@dataclass(frozen=True)
class Outcome:
    """What a stage is told once the step's token is chosen."""

    received: torch.Tensor  # [batch, vocab]: the logits the stage received
    out: torch.Tensor  # [batch, vocab]: the logits it returned
    decision: Decision  # what it decided
    chosen: torch.Tensor  # [batch] ids
    forced: bool  # the token was forced (strategies/forcing.py), not drawn by the selector


T = TypeVar("T", bound=type[TransformBase])


@dataclass(frozen=True)
class StageSpec:
    name: str
    cls: type[TransformBase]
    params: dict[str, str]  # the class's field -> the request parameter it takes
    truncates: bool
    on: dict[str, Any] = dataclasses.field(default_factory=dict)  # request parameters that switch it on

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

    def build(self, p: Any, generator: torch.Generator | None = None, lm: LanguageModel | None = None) -> TransformBase:
        """A fresh stage object for one run, from ``p`` (``generator``, ``lm``: for the stages that need them)."""
        return self.cls.from_settings(self.settings(p), generator, lm)


STAGES: dict[str, StageSpec] = {}
# the request parameters a stage may read, by name: their declarations (range, kind), from ``declare``
DECLARED: dict[str, dataclasses.Field] = {}


def declare(params: type) -> None:
    """Register the fields of the parameter class ``params`` (a dataclass of ``param()`` fields) as the
    declarations the stages' constructors check their values against."""
    for f in dataclasses.fields(params):
        DECLARED[f.name] = f


def stage(name: str, *, params: dict[str, str] | None = None, truncates: bool,
          on: dict[str, Any] | None = None) -> Callable[[T], T]:
    """Register a stage class under ``name`` (its name in a chain's order and in the trace); ``on``: request
    parameters that switch it on, among those it reads (required of a stage that reads any)."""
    def wrap(cls: T) -> T:
        if name in STAGES:
            raise RuntimeError(f"stage {name!r} registered twice")
        if params and not on:
            raise RuntimeError(f"stage {name!r} reads {', '.join(params.values())}: declare on= with values "
                               f"that switch it on")
        stray = sorted(set(on or {}) - set((params or {}).values()))
        if stray:
            raise RuntimeError(f"stage {name!r}: on= names {', '.join(stray)}, which it does not read")
        cls.name = name
        STAGES[name] = StageSpec(name, cls, dict(params or {}), truncates, dict(on or {}))
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


def on_values(names: list[str] | tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
    """Stage name -> the request parameters that switch it on (its ``on``), for the registered stages that
    read parameters (of ``names``, in that order, when given)."""
    return {n: dict(STAGES[n].on) for n in (STAGES if names is None else names) if n in STAGES and STAGES[n].on}
