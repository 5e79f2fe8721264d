"""The one place that decides a figure's colours for the page theme (light or dark).

Chart modules build figures with the playground template and colours that read on both
backgrounds; the page passes the theme it shows, and every figure goes through ``themed``
on its way out (to the browser or to a PNG). So the plot area, axes, ticks, titles, legends
and annotations of every figure, subplots included, follow the page: no figure keeps a light
background in dark mode, and an exported PNG looks like the page it came from.
Pure: plotly only.
"""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio

from playground import charts


@dataclass(frozen=True)
class Theme:
    name: str
    ink: str  # text: ticks, titles, legends, annotations
    grid: str  # grid, zero and axis lines
    page: str  # the page background, painted behind an exported figure (the live page shows through)


THEMES = {
    "light": Theme("light", ink=charts.INK, grid="rgba(148, 163, 184, 0.30)", page="#ffffff"),
    "dark": Theme("dark", ink="#e2e8f0", grid="rgba(148, 163, 184, 0.25)", page="#0b0f19"),
    # before the page has said which theme it shows: a grey that reads on either
    "neutral": Theme("neutral", ink="#94a3b8", grid="rgba(148, 163, 184, 0.28)", page="#ffffff"),
}
LIGHT_INKS = {charts.INK.lower(), "#444", "#444444", "black", "#000", "#000000", "#2a3f5f"}


def theme_named(name: str | None) -> Theme:
    """``name`` from the page ("light" / "dark"); anything else is the neutral theme."""
    return THEMES.get((name or "").strip().lower(), THEMES["neutral"])


def themed(fig: go.Figure, name: str | None, export: bool = False) -> go.Figure:
    """A copy of ``fig`` in the page theme ``name``; ``export`` paints the page colour behind it."""
    t = theme_named(name)
    out = go.Figure(fig)
    background = t.page if export else "rgba(0,0,0,0)"
    out.update_layout(template=pio.templates[charts.TEMPLATE], font_color=t.ink, title_font_color=t.ink,
                      legend_font_color=t.ink, paper_bgcolor=background, plot_bgcolor=background)
    axis = dict(tickfont_color=t.ink, title_font_color=t.ink, gridcolor=t.grid, zerolinecolor=t.grid,
                linecolor=t.grid)
    out.update_xaxes(**axis)
    out.update_yaxes(**axis)
    for ann in out.layout.annotations or ():
        if ann.font.color is None or str(ann.font.color).lower() in LIGHT_INKS:
            ann.font.color = t.ink
    for trace in out.data:
        font = getattr(trace, "textfont", None)
        if font is not None and font.color is not None and str(font.color).lower() in LIGHT_INKS:
            font.color = t.ink
    return out
