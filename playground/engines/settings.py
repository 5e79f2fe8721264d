"""A run's settings as an engine sees them: the sampler chain's values and order, the seed, the token limit,
stop strings and the grammar. Every export writes one of these and every importer reads one back.

A greedy run is the chain at temperature 0 with every other stage off (greedy has no stages of its own);
sampling and gumbel share the chain (gumbel's draws differ, its distribution does not).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from playground.errors import InvalidRequest
from strategies.phases import MAX_BUDGET, MAX_MESSAGE_CHARS, PHASE_FIELDS
from strategies.sampling.grammar import GRAMMAR_KINDS
from strategies.sampling.samplers import WATCHING_FIELDS, SamplerParams
from strategies.stages import STAGES, stages_on

STRATEGIES = ("sampling", "gumbel", "greedy")
MAX_SEED = 2**64 - 1  # the widest seed an engine takes (llama.cpp: uint32; vLLM, transformers: 64 bits)
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 200


@dataclass(frozen=True)
class RunSettings:
    """What a run asked of its sampler; ``seed`` and ``max_new_tokens`` None: not set."""

    params: SamplerParams = field(default_factory=SamplerParams)
    strategy: str = "sampling"
    seed: int | None = 0
    max_new_tokens: int | None = 32
    stop: tuple[str, ...] = ()
    grammar: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if self.seed is not None:
            object.__setattr__(self, "seed", whole("seed", self.seed, 0, MAX_SEED))
        if self.max_new_tokens is not None:
            object.__setattr__(self, "max_new_tokens", whole("max_new_tokens", self.max_new_tokens, 1, 10**9))
        if self.strategy not in STRATEGIES:
            raise InvalidRequest(f"an engine config is made from a greedy, sampling or gumbel run, "
                                 f"got strategy {self.strategy!r}")
        if len(self.stop) > MAX_STOP_STRINGS or any(not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS
                                                    for s in self.stop):
            raise InvalidRequest(f"stop must be at most {MAX_STOP_STRINGS} non-empty strings of at most "
                                 f"{MAX_STOP_CHARS} characters, got {list(self.stop)!r:.200}")
        if self.grammar is not None and (self.grammar.get("kind") not in GRAMMAR_KINDS
                                         or not str(self.grammar.get("text", "")).strip()):
            raise InvalidRequest(f"grammar must be {{'kind': one of {', '.join(GRAMMAR_KINDS)}, 'text': ...}}, "
                                 f"got {self.grammar!r:.200}")

    @property
    def samples(self) -> bool:
        """Whether the run draws at random (temperature above 0 and not greedy)."""
        return self.strategy != "greedy" and self.params.temperature > 0

    def on(self) -> list[str]:
        """The stages the run turns on, in its order."""
        return stages_on(self.params, self.params.order.split(","))

    def value(self, name: str) -> Any:
        return getattr(self.params, name)


def number(name: str, value: Any) -> float:
    """``value`` (a number or its text, as a config writes it) as a float; InvalidRequest naming ``name``."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise InvalidRequest(f"{name} must be a number, got {value!r:.80}") from None


def whole(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an integer in [low, high] (either end open when None); InvalidRequest naming both."""
    where = f" in [{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
    try:
        x = number(name, value)
    except InvalidRequest:
        x = math.nan
    if not x.is_integer() or (low is not None and x < low) or (high is not None and x > high):
        raise InvalidRequest(f"{name} must be an integer{where}, got {value!r:.80}")
    return int(x)


def sampler_params(values: Mapping[str, Any]) -> SamplerParams:
    """SamplerParams from playground parameter names (numbers or their text); unknown names are refused."""
    return SamplerParams.from_dict(dict(values))  # type: ignore[return-value]


def settings_for(strategy: str, params: Mapping[str, Any], seed: int | None = 0, max_new_tokens: int | None = 32,
                 stop: tuple[str, ...] = (), grammar: Mapping[str, str] | None = None) -> RunSettings:
    """The settings of a run of ``strategy`` with ``params`` (its Params' fields, as a request gives them);
    the knobs that watch a run (loops, watch-list) are not the sampler's and are left out. A greedy run keeps
    its phases (a marker, a budget) beside temperature 0."""
    if strategy not in STRATEGIES:
        raise InvalidRequest(f"an engine config is made from a greedy, sampling or gumbel run, got strategy "
                             f"{strategy!r}")
    values = {k: v for k, v in params.items() if k not in WATCHING_FIELDS}
    if strategy == "greedy":
        values = {"temperature": 0.0, **{k: v for k, v in values.items() if k in PHASE_FIELDS}}
    chosen = dict(grammar) if grammar else None
    if chosen is not None:
        chosen = {"kind": str(chosen.get("kind")), "text": str(chosen.get("text", ""))}
    return RunSettings(sampler_params(values), strategy, seed, max_new_tokens, tuple(stop), chosen)


def settings_of_trace(trace: Mapping[str, Any]) -> RunSettings:
    """The settings a trace JSON records: its strategy, params, seed, grammar and its limit (``max_new_tokens``;
    a trace written before it was recorded gives its token count)."""
    if not isinstance(trace, Mapping) or "strategy" not in trace or not isinstance(trace.get("params"), Mapping):
        raise InvalidRequest("a trace must be the JSON object `python -m playground run --json` writes "
                             "(with strategy and params)")
    tokens = trace.get("tokens") or []
    limit = trace.get("max_new_tokens") or (len(tokens) if tokens else None)
    return settings_for(str(trace["strategy"]), trace["params"], trace.get("seed"), limit,
                        grammar=trace.get("grammar"))


def changed_values(params: SamplerParams) -> dict[str, Any]:
    """The chain's values that differ from SamplerParams' defaults (order included), for a sentence; the
    phases (a marker, the answer's values, a budget) are not the chain's: ``phase_values`` has them."""
    default = SamplerParams()
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if f.name not in WATCHING_FIELDS and f.name not in PHASE_FIELDS
            and getattr(params, f.name) != getattr(default, f.name)}


def phase_values(params: SamplerParams) -> dict[str, Any]:
    """The phase settings that differ from their defaults (strategies/phases.py)."""
    default = SamplerParams()
    return {name: getattr(params, name) for name in PHASE_FIELDS if getattr(params, name) != getattr(default, name)}


def budget_of(name: str, value: Any, left: list[str]) -> int:
    """An engine's thinking budget (-1 unlimited) as the playground's, capped at its MAX_BUDGET (said in
    ``left``); InvalidRequest naming ``name`` for anything but an integer from -1."""
    budget = whole(name, value, -1)
    if budget > MAX_BUDGET:
        left.append(f"{name} {budget}: the playground's thinking budget goes up to {MAX_BUDGET}; set to {MAX_BUDGET}")
        return MAX_BUDGET
    return budget


def message_of(name: str, value: Any, left: list[str]) -> str:
    """An engine's budget message, cut to the playground's MAX_MESSAGE_CHARS (said in ``left``)."""
    text = str(value)
    if len(text) > MAX_MESSAGE_CHARS:
        left.append(f"{name}: {len(text)} characters; the playground keeps the first {MAX_MESSAGE_CHARS}")
    return text[:MAX_MESSAGE_CHARS]


def stage_params(name: str) -> list[str]:
    """The request parameters the stage ``name`` reads."""
    return list(STAGES[name].params.values())


def json_object(text: str) -> dict[str, Any]:
    """``text`` as a JSON object; InvalidRequest saying where it does not parse, or what it is instead."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"the JSON does not parse: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"the JSON must be an object, got {type(data).__name__}")
    return data
