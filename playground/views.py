"""Strategy-specific views, plugged in by what the trace carries.

Each module ``playground/charts_<family>.py`` defines ``views(trace) -> list[View]``
that returns nothing for a trace without its section (``beam``, ``rounds``,
contrastive fields...). The page shows whatever comes back, so a new family
adds views without touching the UI. Pure: no torch, no gradio.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

import playground


@dataclass
class View:
    title: str
    figure: go.Figure | None = None  # a plotly figure, or
    html: str | None = None  # an HTML fragment whose model text is already escaped


def strategy_views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """Every family's views of ``trace``; ``step`` reaches the views that take one (a per-step chart)."""
    out: list[View] = []
    for mod in sorted(pkgutil.iter_modules(playground.__path__), key=lambda m: m.name):
        if mod.name.startswith("charts_"):
            views = importlib.import_module(f"playground.{mod.name}").views
            takes_step = step is not None and "step" in inspect.signature(views).parameters
            out.extend(views(trace, step=step) if takes_step else views(trace))
    return out
