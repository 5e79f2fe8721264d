"""The one place that decides a figure's colours for the page theme (light or dark).

Chart modules build figures with the playground template and colours that read on both
backgrounds; the page passes the theme it shows, and every figure goes through ``themed``
on its way out (to the browser or to a PNG). So the plot area, axes, ticks, titles, legends
and annotations of every figure, subplots included, follow the page: no figure keeps a light
background in dark mode, and an exported PNG looks like the page it came from.
Pure: plotly only.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from playground.charts.common import CAPTION, CHOSEN_WORD, NOTES, place_caption, wrap
from playground.charts.palette import (
    CLEAR,
    DARK_GRID,
    DARK_INK,
    DARK_PAGE,
    INK,
    LIGHT_GRID,
    LIGHT_INK,
    LIGHT_PAGE,
    NEUTRAL_GRID,
    NEUTRAL_INK,
    NEUTRAL_PAGE,
    PLOTLY_INKS,
    TEMPLATE,
)
from playground.charts.steps import legend_below_buttons


@dataclass(frozen=True)
class Theme:
    name: str
    ink: str  # text: ticks, titles, legends, annotations
    grid: str  # grid, zero and axis lines
    page: str  # the page background, painted behind an exported figure (the live page shows through)


THEMES = {
    "light": Theme("light", ink=LIGHT_INK, grid=LIGHT_GRID, page=LIGHT_PAGE),
    "dark": Theme("dark", ink=DARK_INK, grid=DARK_GRID, page=DARK_PAGE),
    # before the page has said which theme it shows: a grey that reads on either
    "neutral": Theme("neutral", ink=NEUTRAL_INK, grid=NEUTRAL_GRID, page=NEUTRAL_PAGE),
}
LIGHT_INKS = {INK.lower(), *PLOTLY_INKS}  # inks written for a light page, which themed() turns to the page's


NARROW = 700  # px: below this the page is a phone's, and figures get smaller type and wrapped titles


def theme_named(view: str | None) -> Theme:
    """The theme of a page ``view`` ("light", "dark", or with the page width: "dark:390");
    anything else is the neutral theme."""
    return THEMES.get((view or "").split(":")[0].strip().lower(), THEMES["neutral"])


def view_width(view: str | None) -> int | None:
    """The page width in a ``view`` ("light:390" -> 390), None when it does not say."""
    _, _, width = (view or "").partition(":")
    return int(width) if width.strip().isdigit() else None


def themed(fig: go.Figure, view: str | None, export: bool = False) -> go.Figure:
    """A copy of ``fig`` for the page ``view`` (its theme, and its width on a phone); ``export``
    paints the page colour behind it."""
    t = theme_named(view)
    out = go.Figure(fig)
    background = t.page if export else CLEAR
    out.update_layout(template=pio.templates[TEMPLATE], font_color=t.ink, title_font_color=t.ink,
                      legend_font_color=t.ink, paper_bgcolor=background, plot_bgcolor=background)
    axis = dict(tickfont_color=t.ink, title_font_color=t.ink, gridcolor=t.grid, zerolinecolor=t.grid,
                linecolor=t.grid)
    out.update_xaxes(**axis)
    out.update_yaxes(**axis)
    for ann in out.layout.annotations or ():
        if ann.font.color is None or str(ann.font.color).lower() in LIGHT_INKS:
            ann.font.color = t.ink
        if ann.name == CHOSEN_WORD:  # over a taller neighbour's bar (bars a phone's width apart), still legible
            ann.bgcolor = t.page
    for trace in out.data:
        font = getattr(trace, "textfont", None)
        if font is not None and font.color is not None and str(font.color).lower() in LIGHT_INKS:
            font.color = t.ink
    for menu in out.layout.updatemenus or ():
        menu.font.color = t.ink
        _chosen_word_on(menu, t.page)
    width = view_width(view)
    narrow = width is not None and width < NARROW and not export
    if narrow and width is not None:
        _fit_narrow(out, width)
    elif width is not None:
        if _compact(out):  # a Compare side: about 30% of a desktop page
            _wrap_title(out, int(width * 0.3))
        # the main column: about 70% of a desktop page; a Compare side's plot: under a quarter of it
        lines = _wrap_panel_titles(out, int(width * (0.22 if _compact(out) else 0.7)), 14)
        if lines > 1:  # room above the panels for their extra lines
            top = out.layout.margin.t if out.layout.margin.t is not None else 86
            out.update_layout(margin_t=top + 17 * (lines - 1))
        _legend_under_title(out, int(width * (0.22 if _compact(out) else 0.6)) - 120)
    if not narrow:  # a phone's rows of buttons over the plot are placed by _fit_narrow
        _place_top_buttons(out, narrow)
    # the caption's row at the foot, under whatever the margins hold now; its lines as long as the figure
    # is wide (12 px type: about 6.6 px a character)
    compact = _compact(out)
    # the page's padding and the margins; a strategy's view may sit in a half-width Compare column, so a
    # desktop caption never runs longer than such a column holds
    plot_width = (width - 40 - 80) if narrow and width is not None else min((width or 1440) * 0.7 - 120, 300 if compact else 520)
    place_caption(out, max(30, int(plot_width / 6.6)), narrow or compact)
    return out


MENU_ROW = 28  # px a row of in-chart buttons takes on a phone (10 px type)
LEGEND_ROW = 20  # px a row of a horizontal legend takes (13 px type)
TITLE_ROOM = 40  # px from the figure's top to under a one-line title (17 px type at y 0.97)


def legend_rows(fig: go.Figure, room: int) -> int:
    """The rows a horizontal legend of ``fig`` wraps into across ``room`` px. An item is its symbol and
    the gap after it (about 40 px; the last column needs no gap, 30 px of it) and its name (about 6.8 px a
    character at 13 px type); plotly lines wrapped items up in columns, each as wide as its widest item,
    so the rows are those of the most columns that fit."""
    widths = [40 + 6.8 * len(re.sub(r"<[^>]+>", "", str(t.name))) for t in fig.data
              if t.name and t.showlegend is not False and t.visible is not False]
    for columns in range(len(widths), 0, -1):
        if columns == 1 or sum(max(widths[c::columns]) for c in range(columns)) - 30 <= room:
            return -(-len(widths) // columns)
    return 0


def _legend_under_title(fig: go.Figure, room: int) -> None:
    """A legend above the plot grows upwards from it, row by row: the top margin grows (and the figure with
    it, the plot keeping its height) until its top row sits under the title's lines."""
    legend = fig.layout.legend
    y = 1.0 if legend.y is None else legend.y  # the template's: a row over the plot, right-aligned
    if fig.layout.showlegend is False or (legend.orientation or "h") != "h" or y < 1:
        return
    title_lines = str(fig.layout.title.text or "").count("<br>") + 1 if fig.layout.title.text else 0
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 86
    height = fig.layout.height or 450
    plot = max(60, height - top - (fig.layout.margin.b if fig.layout.margin.b is not None else 60))
    above = int((y - 1) * plot)  # the legend's foot over the plot's top
    need = (TITLE_ROOM + 18 * (title_lines - 1) if title_lines else 8) + LEGEND_ROW * legend_rows(fig, room) + above + 6
    if need > top:
        fig.update_layout(margin_t=need, height=height + need - top)


def _compact(fig: go.Figure) -> bool:
    """The figure was drawn for a half-width Compare column (steps.step_figures' ``compact``)."""
    return isinstance(fig.layout.meta, dict) and bool(fig.layout.meta.get("compact"))


def _wrap_panel_titles(fig: go.Figure, plot_width: int, size: int) -> int:
    """Subplot titles wrapped to their panel's width; returns the most lines one of them got."""
    panel_chars = max(12, int(plot_width / max(1, _columns(fig)) / (0.6 * size)))
    most = 0
    for ann in fig.layout.annotations or ():
        if ann.text and ann.yref == "paper" and (ann.yanchor or "") == "bottom":  # a subplot's title
            lines = wrap(ann.text, panel_chars)
            ann.text = "<br>".join(lines)
            most = max(most, len(lines))
    return most


def _fit_panel_titles(fig: go.Figure, plot_width: int) -> None:
    """Subplot titles on a phone, each wrapped to its own panel's width: the figure less the page's
    padding, the margins and the y axis's labels, times the panel's share of the plot (three panels of a
    waterfall get about 60 px each). 12 px type where a panel holds 12 characters a line, else 10 px."""
    area = plot_width - 24 - max(40, _ylabel_room(fig)) - 40
    for ann in fig.layout.annotations or ():
        if not (ann.text and ann.yref == "paper" and (ann.yanchor or "") == "bottom"):  # a subplot's title
            continue
        room = area * _panel_share(fig, ann.x)
        size = 12 if room >= 12 * 0.6 * 12 else 10
        ann.text = "<br>".join(wrap(str(ann.text), max(6, int(room / (0.6 * size)))))
        ann.font.size = size


def _ylabel_room(fig: go.Figure) -> int:
    """Pixels left of the plot that the first y axis's tick labels and title take (11 px type)."""
    ax = fig.layout.yaxis
    if ax.showticklabels is False or ax.visible is False:
        return 0
    chars = max((len(re.sub(r"<[^>]+>", "", str(t))) for t in ax.ticktext or ()), default=4)
    return int(chars * 0.6 * (ax.tickfont.size or 11)) + 10 + (16 if ax.title.text else 0)


def _panel_share(fig: go.Figure, x: float | None) -> float:
    """The share of the plot's width of the panel whose centre is at paper ``x`` (a subplot title's place)."""
    for name in fig.layout:
        if name.startswith("xaxis") and fig.layout[name].domain is not None and x is not None:
            left, right = fig.layout[name].domain
            if left - 1e-6 <= x <= right + 1e-6:
                return right - left
    return 1 / _columns(fig)


def _wrap_title(fig: go.Figure, width: int, size: int = 17) -> None:
    """A plain title longer than ``width`` px (at about 0.6 of its type size a character) wrapped, the top
    margin and the figure growing by its extra lines (plotly runs a long title off the figure's right)."""
    title = str(fig.layout.title.text or "")
    if not title or "<" in title:  # already broken, or marked up: left as it is
        return
    lines = wrap(title, max(16, int(width / (0.6 * size))))
    if len(lines) > 1:
        top = fig.layout.margin.t if fig.layout.margin.t is not None else 86
        extra = 18 * (len(lines) - 1)
        fig.update_layout(title_text="<br>".join(lines), margin_t=top + extra,
                          height=(fig.layout.height or 450) + extra)


def _chosen_word_on(menu: Any, page: str) -> None:
    """The chosen word's patch of page colour in the annotations a menu's buttons swap in (the distribution's
    bases), as themed gives the figure's own."""
    buttons = list(menu.buttons or ())
    for button in buttons:
        args = list(button.args or ())
        if len(args) > 1 and isinstance(args[1], dict) and args[1].get("annotations") is not None:
            swapped = [a.to_plotly_json() if hasattr(a, "to_plotly_json") else dict(a) for a in args[1]["annotations"]]
            swapped = [dict(a, bgcolor=page) if a.get("name") == CHOSEN_WORD else a for a in swapped]
            button.args = [args[0], dict(args[1], annotations=swapped), *args[2:]]
    menu.buttons = buttons


def _fit_narrow(fig: go.Figure, page_width: int) -> None:
    """Smaller type and titles wrapped to the width a phone gives a figure, with room above the plot
    for the extra lines (plotly neither wraps nor shrinks a title: it runs off the figure)."""
    size = 14
    plot_width = page_width - 40  # the page's padding around a figure
    per_line = max(16, int((plot_width - 16) / (0.6 * size)))
    title = fig.layout.title.text
    extra = 0
    if title:
        lines = wrap(title, per_line)
        extra = len(lines) - 1
        fig.layout.title.text = "<br>".join(lines)
    # the legend goes under the plot: above it, it would sit on the wrapped title
    fig.update_layout(title_font_size=size, font_size=12,
                      legend=dict(orientation="h", y=-0.3, yanchor="top", x=0, xanchor="left", font_size=11))
    legend_below_buttons(fig)
    fig.update_xaxes(title_font_size=12, tickfont_size=11)
    fig.update_yaxes(title_font_size=12, tickfont_size=11)
    _fit_panel_titles(fig, plot_width)
    if _columns(fig) > 2:  # panels side by side: their value ticks would run into the next panel's
        for ax in fig.select_xaxes():
            if ax.type != "category" and ax.tickvals is None:
                ax.nticks = 3
    # the title's lines, and subplot titles under it, set the top margin (the legend is below now)
    panel_lines = max((str(a.text).count("<br>") + 1 for a in fig.layout.annotations or ()
                       if a.yref == "paper" and (a.yanchor or "") == "bottom"), default=0)
    fig.update_layout(margin_t=34 + 19 * (extra + 1) + 16 * panel_lines, margin_l=40, margin_r=40)
    for ax in fig.select_xaxes():
        if ax.dtick is not None and ax.type != "category":  # a tick every step would overlap
            ax.dtick, ax.nticks = None, 7
    _thin_token_ticks(fig, plot_width)
    moved = False
    for menu in fig.layout.updatemenus or ():  # the in-chart buttons fit the phone's width in one row
        menu.font.size = 10
        menu.pad = dict(t=2, r=2, l=0, b=2)
        if menu.y is not None and menu.y < 0 and (menu.xanchor or "left") == "left":
            # a row under the axis starts at the figure's left edge, in type small enough to end at its right
            menu.x, menu.font.size = -40 / max(100, plot_width - 80), 9
        elif menu.y is not None and 0 < menu.y <= 1 and (menu.yanchor or "") == "top":
            # buttons over the plot's top (the distribution's scale and zoom) would cover the labels there on
            # a plot this narrow: they go in a row of their own over it, the plot keeping its height
            menu.y, menu.yanchor = 1.0, "bottom"
            if not moved:
                fig.update_layout(margin_t=fig.layout.margin.t + MENU_ROW, height=(fig.layout.height or 450) + MENU_ROW)
            moved = True
    _wrap_line_labels(fig, plot_width)
    most = max(8, plot_width // 28)  # labels closer than this collide: hover keeps them
    for trace in fig.data:
        mode = getattr(trace, "mode", None) or ""
        if "text" in mode and trace.x is not None and len(trace.x) > most:
            trace.mode = mode.replace("+text", "").replace("text+", "") or "markers"


def _wrap_line_labels(fig: go.Figure, plot_width: int) -> None:
    """Labels placed on the data (a line's label, a marked bar's) in lines that fit half the plot on a
    phone (11 px type: about 6 px a character), so one beside a line near either edge stays in the figure;
    the annotations the in-chart buttons swap in (the distribution's bases) too."""
    per_line = max(12, int((plot_width - 160) / 2 / 6))

    def fitted(ann: dict) -> dict:
        text = str(ann.get("text") or "")
        if (ann.get("name") in (CAPTION, NOTES) or not str(ann.get("xref") or "").startswith("x")
                or len(re.sub(r"<[^>]+>", "", text)) <= per_line):
            return ann
        return dict(ann, text="<br>".join(wrap(text, per_line)), font=dict(ann.get("font") or {}, size=11))

    fig.layout.annotations = [fitted(a.to_plotly_json()) for a in fig.layout.annotations or ()]
    for menu in fig.layout.updatemenus or ():
        buttons = list(menu.buttons or ())
        for button in buttons:
            args = list(button.args or ())
            if len(args) > 1 and isinstance(args[1], dict) and args[1].get("annotations") is not None:
                swapped = [fitted(a.to_plotly_json() if hasattr(a, "to_plotly_json") else dict(a))
                           for a in args[1]["annotations"]]
                button.args = [args[0], dict(args[1], annotations=swapped), *args[2:]]
        menu.buttons = buttons


TOP_MARKS = 24  # px under the plot's top edge that the marks written along it take (a cut's label)
BUTTON_ROW = 26  # px a row of in-chart buttons takes


def _place_top_buttons(fig: go.Figure, narrow: bool) -> None:
    """The in-chart buttons placed at the plot's top right (scale, zoom) clear of the chart's labels: their
    right edge at the plot's right end, off the right axis's ticks, and under the marks written along the
    plot's top edge; on a phone, where the row spans the plot, above the plot, under the title."""
    menus = [m for m in fig.layout.updatemenus or ()
             if m.y is not None and m.y >= 0 and m.xanchor == "right" and m.visible is not False]
    if not menus:
        return
    margin = fig.layout.margin
    top = margin.t if margin.t is not None else 86
    plot = max(60, (fig.layout.height or 450) - top - (margin.b if margin.b is not None else 60))
    right = fig.layout.xaxis.domain[1] if fig.layout.xaxis.domain else 1.0
    if narrow:  # the plot keeps its height
        fig.update_layout(margin_t=top + BUTTON_ROW, height=(fig.layout.height or 450) + BUTTON_ROW)
    for menu in menus:
        menu.x = min(menu.x if menu.x is not None else 1.0, right)
        if narrow:
            menu.y, menu.yanchor = 1.0, "bottom"
        else:
            menu.y, menu.yanchor = min(menu.y, 1 - TOP_MARKS / plot), "top"


def _columns(fig: go.Figure) -> int:
    """How many subplot columns share the figure's width."""
    lefts = {round(ax.domain[0], 3) for name in fig.layout if name.startswith("xaxis")
             for ax in [fig.layout[name]] if ax.domain is not None}
    return max(1, len(lefts))


def _thin_token_ticks(fig: go.Figure, plot_width: int) -> None:
    """Token labels on a phone: upright-turned (-90°) when angled ones would touch, and only every
    k-th one when even those would (11 px type needs about 13 px a label); hover keeps every token."""
    for ax in fig.select_xaxes():
        if ax.tickvals is None or ax.ticktext is None or len(ax.tickvals) < 2:
            continue
        n = len(ax.tickvals)
        room = (plot_width - 80) / _columns(fig) / n  # px a label gets (the phone margins: 40 px a side)
        if room >= 26:
            continue
        ax.tickangle, ax.tickfont.size = -90, 10
        every = max(1, math.ceil(13 / room))
        if every > 1:
            ax.ticktext = [t if i % every == 0 else "" for i, t in enumerate(ax.ticktext)]
