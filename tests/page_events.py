"""Calling the page's event functions as Gradio does: an event whose inputs were given as a set takes one
{component: value} dict, any other its values in order."""
from __future__ import annotations

from typing import Any, Callable


def call(fn: Any, value_of: Callable[[Any], Any], *extra: Any) -> Any:
    """``fn`` (a demo's BlockFunction) called with each input's value from ``value_of(component)``;
    ``extra`` are the values after the inputs (a positional event's tail)."""
    if fn.inputs_as_dict:
        return fn.fn({c: value_of(c) for c in fn.inputs}, *extra)
    return fn.fn(*[value_of(c) for c in fn.inputs], *extra)
