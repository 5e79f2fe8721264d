"""Strategy-specific views, plugged in by what the trace carries.

Each family module below defines ``views(trace) -> list[View]`` that returns nothing for a trace
without its section (``beam``, ``rounds``, contrastive fields...). The page shows whatever comes
back, so a new family adds views by adding its module to ``FAMILIES``, without touching the UI.
Pure: no torch, no gradio.
"""
from __future__ import annotations

import inspect
from typing import Any

from playground.charts import (
    beam,
    contrastive,
    eagle,
    entropy_map,
    grammar,
    lens,
    loops,
    samplers,
    speculative,
    stage_warnings,
    watch,
    watermark,
)
from playground.charts.common import View

# in the order the page shows their views
FAMILIES = (grammar, lens, beam, contrastive, eagle, loops, watch, stage_warnings, samplers, watermark, speculative,
            entropy_map)


def strategy_views(trace: dict[str, Any], step: int | None = None) -> list[View]:
    """Every family's views of ``trace``; ``step`` reaches the views that take one (a per-step chart)."""
    out: list[View] = []
    for family in FAMILIES:
        takes_step = step is not None and "step" in inspect.signature(family.views).parameters
        out.extend(family.views(trace, step=step) if takes_step else family.views(trace))
    return out
