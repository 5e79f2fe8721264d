"""The page's three step charts together (distribution, waterfall, overview), the figure shown before a
run, and a step index made valid for a trace. Pure: no torch, no gradio.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import plotly.graph_objects as go

from playground.charts.common import wrap
from playground.charts.distribution import switchable_distribution
from playground.charts.overview import overview_figure
from playground.charts.palette import RAW, TEMPLATE
from playground.charts.waterfall import waterfall_figure


class StepCharts(NamedTuple):
    """The page's three step charts by name: their figures (``step_figures``), or the plots that show them
    (a side's, Score's), so figures go to plots by name (``by_name``), never by position."""

    distribution: Any  # the step's distribution (switchable: probability, logit, log-probability)
    chain: Any  # the sampler chain as a waterfall: what each stage kept
    overview: Any  # the whole run, this step marked

    def by_name(self, values: "StepCharts") -> dict[Any, Any]:
        """{each of these (plots): the value of the same name in ``values`` (their figures)}."""
        return {getattr(self, name): getattr(values, name) for name in self._fields}

    def apply(self, fn: Callable[[Any], Any]) -> "StepCharts":
        """The record with ``fn`` of each value (a figure to a plot's payload)."""
        return StepCharts(*(fn(value) for value in self))


def step_figures(trace: dict[str, Any], step: int, compact: bool = False) -> StepCharts:
    """The page's three charts for ``step``.
    ``compact``: for half-width columns (compare): smaller type, titles wrapped, legends under the plot."""
    figs = StepCharts(switchable_distribution(trace, step), waterfall_figure(trace, step), overview_figure(trace, step))
    if compact:
        for fig in figs:
            lines = wrap(fig.layout.title.text or "", 46)  # 15 px type in a half-width column
            fig.update_layout(title_text="<br>".join(lines), title_font_size=15, font_size=12,
                              legend=dict(orientation="h", y=-0.28, yanchor="top", x=0, xanchor="left",
                                          font_size=11),
                              margin=dict(t=(80 if fig is figs.chain else 44) + 20 * len(lines), b=40))
        figs.chain.update_xaxes(nticks=3)
        legend_below_buttons(figs.distribution)
        for fig in figs:  # a half-width column: the caption wraps shorter, the legend under the plot takes rows
            fig.update_layout(meta={"compact": True})
    return figs


def legend_below_buttons(fig: go.Figure) -> None:
    """A legend under the plot goes below the buttons that sit under the axis (the distribution's
    basis buttons), with the room it needs; calling it again changes nothing."""
    below = [m.y for m in fig.layout.updatemenus or () if m.y is not None and m.y < 0]
    if not below:
        return
    if (fig.layout.margin.b or 0) < 190:
        fig.update_layout(margin_b=190, height=(fig.layout.height or 460) + 80)
    fig.update_layout(legend_y=min(below) - 0.16)


def empty_figure(message: str = "Generate to see the charts") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font=dict(size=16, color=RAW), x=0.5, y=0.5,
                       xref="paper", yref="paper")
    fig.update_layout(template=TEMPLATE, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      margin=dict(l=10, r=10, t=10, b=10), height=260)
    return fig


def clamp_step(trace: dict[str, Any] | None, step: Any) -> int | None:
    """``step`` as a valid index into the trace's steps, or None when there are none."""
    n = len((trace or {}).get("steps") or [])
    if n == 0:
        return None
    try:
        k = int(float(step))
    except (TypeError, ValueError):
        k = 0
    return min(max(k, 0), n - 1)
