"""The page's events called the way the browser calls them, for tests that fire handlers without one.

An event made by ``playground.ui.gather.on`` takes the page's controls as one gathered JSON box (and
its States); ``as_called`` shows it with the controls as its inputs again, and its ``fn`` takes their
values in that order, gathers them as the browser does, and calls the real handler.
"""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import gradio as gr


def as_called(block_fn: Any) -> Any:
    """``block_fn`` (one of ``demo.fns``) with the controls it gathers as its ``inputs``."""
    inputs = getattr(block_fn.fn, "inputs", None)
    if inputs is None:
        return block_fn

    def fn(*values: Any) -> Any:
        given, extra = values[:len(inputs)], values[len(inputs):]
        gathered = json.dumps([v for c, v in zip(inputs, given) if not isinstance(c, gr.State)])
        states = [v for c, v in zip(inputs, given) if isinstance(c, gr.State)]
        return block_fn.fn(gathered, *states, *extra)

    return SimpleNamespace(fn=fn, inputs=list(inputs), outputs=block_fn.outputs, api_name=block_fn.api_name)
