"""The output column of one run (Explore's, or a Compare side) and the strategy views' slots."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gradio as gr
import plotly.graph_objects as go

from playground.charts.common import escape
from playground.charts.steps import StepCharts, clamp_step, empty_figure
from playground.charts.text import legend_html, token_html
from playground.charts.views import strategy_views
from playground.ui.events import Updates, plot_component, plot_value, text_js
from playground.ui.handlers import select_step, status_html, stopped

if TYPE_CHECKING:
    from playground.charts.common import View
    from playground.ui.handlers import Frame

GLOSSARY = """- **entropy**: how spread the distribution of a step is, −Σ p·log p; 0 when one token has it all.
- **surprisal**: −log p of the token that was chosen; the more surprising, the higher.
- **nats**: the unit of both when the log is natural (bits use log₂; 1 nat ≈ 1.44 bits).
- **varentropy**: the variance of the surprisal over the distribution: how uneven its spread is.
- **tau (τ)**: two meanings. In speculative decoding and EAGLE, the tokens one round adds (accepted drafts
  plus the target's own token); a higher τ means fewer target passes per token. In Mirostat, the target
  surprise in bits: μ (the cut, starting at 2τ) moves each step until the chosen tokens' −log₂ p averages τ.
- **Z**: with a grammar, the share of the model's probability the allowed tokens had at a step (1: the
  grammar took nothing away).
- **token marks**: `·` is a space and `↵` a newline inside a token, so `·the` is " the"."""

VIEW_PLOTS = 5  # plot slots for strategy-specific views (beam tree, rounds, contrastive...)
COMPARE_VIEW_PLOTS = 2  # the same on each Compare side (the tree, the round detail...)
VIEW_PREFIX = "pg-view"  # the slots' element ids: pg-view-0..., pg-view-html (slot_ids)


def slot_ids(count: int, prefix: str, suffix: str = "") -> tuple[list[str], str]:
    """The element ids of ``count`` view slots and their HTML slot: ``pg-view-0``... and ``pg-view-html``
    (a Compare side's with its suffix: ``pg-view-a-0``..., ``pg-view-html-a``)."""
    return [f"{prefix}{suffix}-{i}" for i in range(count)], f"{prefix}-html{suffix}"


@dataclass
class ViewSlots:
    """Where a strategy's own views go: ``plots`` figure slots, then one HTML slot for the views drawn as
    HTML and for naming the views past the figure slots."""

    plots: list[gr.Plot]
    html: gr.HTML
    compact: bool = False  # a Compare side's: its figures are drawn for a half-width column

    @classmethod
    def make(cls, count: int, prefix: str, suffix: str = "", compact: bool = False) -> ViewSlots:
        """``count`` hidden figure slots and the HTML slot, with ``slot_ids``' element ids; each view's
        figure carries its own title: no Gradio label on top of it."""
        plot_ids, html_id = slot_ids(count, prefix, suffix)
        return cls([plot_component(visible=False, show_label=False, elem_id=i) for i in plot_ids],
                   gr.HTML(visible=False, elem_id=html_id), compact)

    @property
    def components(self) -> list[gr.Component]:
        return [*self.plots, self.html]

    def updates(self, views: list[View] | None, theme: str) -> Updates:
        """Fill the figure slots and the HTML slot from what the trace carries; hide the unused ones
        (None: leave them as they are)."""
        if views is None:
            return {}
        drawn = [v for v in views if v.figure is not None]
        figs, left_out = drawn[:len(self.plots)], drawn[len(self.plots):]
        html_parts = [f'<div class="pg-view"><h3>{escape(v.title)}</h3>{v.html}</div>' for v in views if v.html]
        if left_out:  # never a silent drop: the views past the page's slots are named
            html_parts.append(f'<p>{len(left_out)} more view{"s" if len(left_out) > 1 else ""} of this '
                              f'run than this panel shows: {escape("; ".join(v.title for v in left_out))}</p>')
        out: Updates = {slot: gr.update(visible=False) for slot in self.plots}
        out.update((slot, gr.update(value=plot_value(self._fit(v.figure), theme), label=v.title, visible=True))
                   for slot, v in zip(self.plots, figs))
        out[self.html] = gr.update(value="".join(html_parts), visible=bool(html_parts))
        return out

    def _fit(self, fig: Any) -> Any:
        """``fig`` marked for a half-width column where the slots are a Compare side's (its caption, title
        and legend then wrap to that column rather than run off its right)."""
        if not self.compact:
            return fig
        out = go.Figure(fig)
        out.update_layout(meta={**(out.layout.meta if isinstance(out.layout.meta, dict) else {}), "compact": True})
        return out

    def step_updates(self, trace: dict[str, Any] | None, step: Any, theme: str) -> Updates:
        """The views redrawn for a newly selected step (a per-step view follows the slider)."""
        k = clamp_step(trace, step)
        return self.updates(strategy_views(trace, k) if trace and k is not None else None, theme)


class Side:
    """The output column of one run: status line, coloured text, and the three charts."""

    def __init__(self, key: str, compact: bool) -> None:
        self.key, self.compact = key, compact
        suffix = "" if key == "main" else f"-{key}"
        first = f"<div class=\"pg-status\">{'Ready.' if key == 'main' else key.upper()}</div>"
        self.status = gr.HTML(first, elem_id=f"pg-status{suffix}")
        self.text = gr.HTML(token_html({}), js_on_load=text_js(key), elem_id=f"pg-text{suffix}",
                            min_height=90)
        if key == "main":
            gr.HTML(legend_html())
        # the Explore side: a strategy's own views (beam tree, rounds, EAGLE tree...) go right under the text
        self.view_slot = gr.Column(elem_id="pg-views") if key == "main" else None
        if key == "main":
            with gr.Accordion("Glossary: entropy, surprisal, nats, tau, Z, the token marks", open=False,
                              elem_id="pg-glossary"):
                gr.Markdown(GLOSSARY, elem_classes=["pg-summary"])
        self.over = plot_component(empty_figure(), show_label=False, elem_id=f"pg-overview-{key}")
        # the explore tab puts its step slider between the overview and the step's details
        self.step_slot = gr.Column() if key == "main" else None
        self.dist = plot_component(empty_figure(), show_label=False, elem_id=f"pg-dist{suffix}")
        # under the Explore distribution: whether a bar click branches this run
        self.dist_note = gr.HTML("", elem_id="pg-dist-note") if key == "main" else None
        self.water = plot_component(empty_figure(), show_label=False, elem_id=f"pg-waterfall{suffix}")
        # a compare side shows its own strategy's views (a beam tree, speculative rounds...) under its charts;
        # the Explore side's are the page's (its tab places them)
        self.view_slots = ViewSlots.make(COMPARE_VIEW_PLOTS, VIEW_PREFIX, suffix, compact=True) if key != "main" else None

    def view_updates(self, trace: dict[str, Any] | None, step: Any, theme: str) -> Updates:
        """The side's view slots for ``step`` (nothing for the Explore side: its slots are the page's)."""
        return self.view_slots.step_updates(trace, step, theme) if self.view_slots else {}

    @property
    def charts(self) -> StepCharts:
        """The plots of a step's three charts, by name."""
        return StepCharts(distribution=self.dist, chain=self.water, overview=self.over)

    def chart_updates(self, figures: StepCharts, theme: str) -> Updates:
        """Each of ``figures`` into the plot of its name, in ``theme``."""
        return self.charts.by_name(figures.apply(lambda f: plot_value(f, theme)))

    @property
    def views(self) -> list[gr.Component]:
        """(text, distribution, waterfall, overview): what selecting a step redraws."""
        return [self.text, *self.charts]

    def frame_updates(self, frame: Frame | None, theme: str) -> Updates:
        """The status and views of a streamed frame; charts only when the frame carries them."""
        if frame is None:
            return {}
        out: Updates = {self.status: frame.status, self.text: frame.html}
        if frame.figures:
            out.update(self.chart_updates(frame.figures, theme))
        return out

    def select_updates(self, trace: dict[str, Any] | None, k: Any, show_prompt: bool, theme: str) -> Updates:
        picked = select_step(trace, k, show_prompt, compact=self.compact)
        if not picked:
            return {}
        html, figures = picked
        return {self.text: html, **self.chart_updates(figures, theme)}

    def stopped_status(self, trace: dict[str, Any] | None, show_prompt: bool) -> Updates:
        """After Stop, first: the status line and the text at the last step, cheap to make, so the page
        says it stopped before its charts are drawn again."""
        if not trace or not trace.get("steps"):
            return {}
        trace = stopped(trace)
        last = len(trace["steps"]) - 1
        return {self.status: status_html(trace, final=True), self.text: token_html(trace, last, show_prompt)}

    def stopped_updates(self, trace: dict[str, Any] | None, show_prompt: bool, theme: str) -> Updates:
        """The status and views after Stop: the partial run is final, drawn at its last step."""
        if not trace or not trace.get("steps"):
            return {}
        trace = stopped(trace)
        return {self.status: status_html(trace, final=True),
                **self.select_updates(trace, len(trace["steps"]) - 1, show_prompt, theme)}
