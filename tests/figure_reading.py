"""Reading a distribution or waterfall figure back from its plotly dict, as a browser would get it.

The tests compare what these functions read with the trace's records and with values computed
from the decoder's own logits; they never call the chart helpers that placed the marks.

Conventions the distribution figure keeps (see playground/charts/distribution.py):
- bar traces carry the candidate id in ``customdata[i][0]``;
- a stage drawn on its own input distribution has a scatter with ``meta = {"stage": name,
  "role": "input"}`` (ids in ``customdata``); a stage whose input is the bars has none;
- a stage's cumulative curve has ``meta = {"stage": name, "role": "cumulative"}``;
- a stage's threshold is a layout shape whose ``name`` starts with the stage name.
"""
from __future__ import annotations

from typing import Any


def fig_dict(fig: Any) -> dict[str, Any]:
    return fig.to_dict()


def bar_points(fd: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """id -> {x, y, color} over the distribution figure's bar traces (the legend-only ones skipped)."""
    out = {}
    for t in fd["data"]:
        if t["type"] != "bar" or not t.get("customdata"):
            continue
        colors = t["marker"]["color"]
        for i, (x, y, row) in enumerate(zip(t["x"], t["y"], t["customdata"])):
            out[int(row[0])] = {"x": x, "y": y, "color": colors[i] if isinstance(colors, list) else colors}
    return out


def _meta(t: dict[str, Any]) -> dict[str, Any]:
    return t.get("meta") if isinstance(t.get("meta"), dict) else {}


def stage_points(fd: dict[str, Any], stage: str, role: str) -> dict[int, dict[str, Any]] | None:
    """id -> {x, y, symbol} of the scatter drawn for ``stage`` in ``role``; None when there is none."""
    for t in fd["data"]:
        m = _meta(t)
        if m.get("stage") == stage and m.get("role") == role:
            symbols = (t.get("marker") or {}).get("symbol")
            return {int(row[0]): {"x": x, "y": y, "symbol": symbols[i] if isinstance(symbols, list) else symbols}
                    for i, (x, y, row) in enumerate(zip(t["x"], t["y"], t["customdata"]))}
    return None


def stage_shapes(fd: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    return [s for s in fd["layout"].get("shapes", []) if (s.get("name") or "").split(" ")[0] == stage]


def is_horizontal(shape: dict[str, Any]) -> bool:
    return shape["y0"] == shape["y1"] and shape.get("xref", "x").endswith("domain")


def is_vertical(shape: dict[str, Any]) -> bool:
    return shape["x0"] == shape["x1"] and shape.get("yref", "y").endswith("domain")


def waterfall_panels(fd: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per stage panel, in order: {name, ids, colors, x} (the legend-only bars skipped)."""
    return [{"name": t["name"], "ids": [int(row[2]) for row in t["customdata"]], "colors": t["marker"]["color"],
             "x": t["x"]}
            for t in fd["data"] if t["type"] == "bar" and t.get("customdata")]


def role_points(fd: dict[str, Any], role: str) -> dict[int, dict[str, Any]]:
    """id -> {x, y, base} of the trace whose ``meta`` names ``role`` (the Gumbel panel: "logit", "noise",
    "perturbed", "chosen"); ids in ``customdata[i][0]``; empty when there is none."""
    for t in fd["data"]:
        if _meta(t).get("role") == role:
            bases = t.get("base")
            return {int(row[0]): {"x": x, "y": y, "base": bases[i] if isinstance(bases, list) else bases}
                    for i, (x, y, row) in enumerate(zip(t["x"], t["y"], t["customdata"]))}
    return {}


def role_trace(fd: dict[str, Any], role: str) -> dict[str, Any] | None:
    """The trace whose ``meta`` names ``role``, as the browser gets it; None when there is none."""
    return next((t for t in fd["data"] if _meta(t).get("role") == role), None)
