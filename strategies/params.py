"""Declared, validated strategy parameters.

Each strategy owns a frozen dataclass whose fields are made with ``param()``.
The metadata (range, no-op value, help, choices) is the single source from
which CLI flags and UI controls are derived, and ``__post_init__`` of
``Params`` checks every value against it, with messages of the form
``top_p must be in (0, 1], got 1.5``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from playground.errors import InvalidRequest


def param(default: Any, help: str, *, low: float | None = None, high: float | None = None,
          low_open: bool = False, high_open: bool = False, noop: Any = None,
          choices: tuple[Any, ...] | None = None, step: float | None = None,
          ui_max: float | None = None, filled: bool = False, brief: str | None = None,
          when: Mapping[str, tuple[Any, ...]] | None = None) -> Any:
    """A dataclass field with the metadata that validation, CLI and UI read.

    noop: the value at which the parameter changes nothing (documented in help).
    ui_max: a friendlier slider end than ``high`` (the API still accepts up to high).
    filled: left empty, the run chooses the value and its trace's params record the one it used (as a
    random seed is written into the seed box), so the trace's params replay the run.
    brief: the one line a control shows under its label, where ``help``'s first sentence is longer than
    ``MAX_BRIEF`` characters (``brief_help``); the whole help stays one click away.
    when: the other parameters' values under which the run reads this one ({"draft": ("eagle",)}: only an
    EAGLE draft reads it), so the page shows it only then (``applies``); every value is still validated.
    """
    meta = dict(help=help, low=low, high=high, low_open=low_open, high_open=high_open,
                noop=noop, choices=choices, step=step, ui_max=ui_max, filled=filled, brief=brief,
                when=dict(when or {}))
    return dataclasses.field(default=default, metadata=meta)


MAX_BRIEF = 100  # characters of a control's one line of help
_NOT_AN_END = ("e.g", "i.e", " al", " vs")  # a dot that ends an abbreviation, not a sentence


def brief_help(meta: Mapping[str, Any]) -> str:
    """The one line of help a control shows: its declared ``brief``, else the help's first sentence (up to
    the first full stop or semicolon outside brackets, never an abbreviation's dot), ending with a full
    stop."""
    if meta.get("brief"):
        return str(meta["brief"])
    text, depth = str(meta.get("help") or "").strip(), 0
    for i, ch in enumerate(text):
        depth += (ch in "([{") - (ch in ")]}")
        if (depth == 0 and ch in ".;" and (i + 1 == len(text) or text[i + 1].isspace())
                and not text[:i].endswith(_NOT_AN_END)):
            return text[:i] + "."
    return text + "." if text else ""


def applies(meta: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether a run with ``values`` ({name: value} of the other parameters) reads the parameter declared
    with ``meta``: every parameter its ``when`` names has one of the values listed."""
    return all(values.get(name) in allowed for name, allowed in (meta.get("when") or {}).items())


def number_text(x: float) -> str:
    """``x`` as a message shows it: a whole number in full (2147483648, never 2.14748e+09), any other
    number in its shortest form that reads back as the same value (0.05, 1e-05, 0.30000000000000004)."""
    if isinstance(x, int) or (math.isfinite(x) and float(x).is_integer()):
        return str(int(x))
    return f"{x:g}" if float(f"{x:g}") == x else repr(float(x))


def range_text(meta: Mapping[str, Any]) -> str:
    if meta.get("choices"):
        return "one of " + ", ".join(str(c) for c in meta["choices"])
    low, high = meta.get("low"), meta.get("high")
    left = "(" if meta.get("low_open") else "["
    right = ")" if meta.get("high_open") else "]"
    lo = "-inf" if low is None else number_text(low)
    hi = "inf" if high is None else number_text(high)
    return f"in {left}{lo}, {hi}{right}"


KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def check_value(name: str, value: Any, meta: Mapping[str, Any], kind: type) -> Any:
    """Coerce ``value`` to ``kind`` and check it against ``meta``; return it. A number may come as its
    text (the CLI's flags, a share link); a bool is not a number here (``True`` is no key)."""
    try:
        if kind in (int, float) and isinstance(value, bool):
            raise TypeError
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                value = value.lower() in ("true", "1", "yes")
            else:
                value = bool(value)
        elif kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            value = int(value)
        elif kind is float:
            value = float(value)
        else:
            value = kind(value)
    except (TypeError, ValueError):
        raise InvalidRequest(f"{name} must be {KIND_NAMES[kind]}, got {value!r}") from None
    choices = meta.get("choices")
    if choices:
        if value not in choices:
            raise InvalidRequest(f"{name} must be {range_text(meta)}, got {value!r}")
        return value
    if kind in (int, float):
        low, high = meta.get("low"), meta.get("high")
        bad = isinstance(value, float) and math.isnan(value)
        if low is not None:
            bad = bad or value < low or bool(meta.get("low_open") and value == low)
        if high is not None:
            bad = bad or value > high or bool(meta.get("high_open") and value == high)
        if bad:
            raise InvalidRequest(f"{name} must be {range_text(meta)}, got {number_text(value)}")
    return value


_KINDS = {"int": int, "float": float, "str": str, "bool": bool}


def field_kind(f: dataclasses.Field) -> type:
    t = f.type if isinstance(f.type, str) else f.type.__name__
    return _KINDS[t]


@dataclass(frozen=True)
class Params:
    """Base of every strategy's parameter dataclass: validates on construction."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = check_value(f.name, getattr(self, f.name), f.metadata, field_kind(f))
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Cross-field checks; override where a strategy needs them."""

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Params":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise InvalidRequest(
                f"unknown parameter {unknown[0]!r} for this strategy; allowed: {', '.join(sorted(names)) or 'none'}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def describe(cls: type[Params]) -> list[dict[str, Any]]:
    """Every parameter of ``cls`` as a plain dict: name, type, default, range, help."""
    out = []
    for f in dataclasses.fields(cls):
        m = dict(f.metadata)
        out.append(dict(name=f.name, type=field_kind(f).__name__, default=f.default,
                        range=range_text(m) if (m.get("choices") or field_kind(f) in (int, float)) else "",
                        **m))
    return out
