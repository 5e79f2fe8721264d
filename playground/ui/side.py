"""The output column of one run (Explore's, or a Compare side) and the strategy views' slots."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gradio as gr

from playground.charts.common import escape
from playground.charts.steps import clamp_step, empty_figure
from playground.charts.text import legend_html, token_html
from playground.charts.views import strategy_views
from playground.ui.events import plot_component, plot_value, text_js
from playground.ui.handlers import select_step, status_html, stopped

if TYPE_CHECKING:
    from playground.charts.common import View
    from playground.ui.handlers import Frame

GLOSSARY = """- **entropy**: how spread the distribution of a step is, −Σ p·log p; 0 when one token has it all.
- **surprisal**: −log p of the token that was chosen; the more surprising, the higher.
- **nats**: the unit of both when the log is natural (bits use log₂; 1 nat ≈ 1.44 bits).
- **varentropy**: the variance of the surprisal over the distribution: how uneven its spread is.
- **tau (τ)**: in speculative decoding and EAGLE, the tokens one round adds (accepted drafts plus the
  target's own token); a higher τ means fewer target passes per token.
- **Z**: with a grammar, the share of the model's probability the allowed tokens had at a step (1: the
  grammar took nothing away).
- **token marks**: `·` is a space and `↵` a newline inside a token, so `·the` is " the"."""

VIEW_PLOTS = 5  # plot slots for strategy-specific views (beam tree, rounds, contrastive...)
COMPARE_VIEW_PLOTS = 2  # the same on each Compare side (the tree, the round detail...)


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
        # a compare side shows its own strategy's views (a beam tree, speculative rounds...) under its charts
        self.view_slots: list[gr.Component] = []
        if key != "main":
            self.view_slots = [plot_component(visible=False, show_label=False, elem_id=f"pg-view{suffix}-{i}")
                               for i in range(COMPARE_VIEW_PLOTS)]
            self.view_slots.append(gr.HTML(visible=False, elem_id=f"pg-view-html{suffix}"))

    def view_updates(self, trace: dict[str, Any] | None, step: Any, theme: str) -> list[Any]:
        """The side's view slots for ``step`` (nothing for the Explore side: its slots are the page's)."""
        if not self.view_slots:
            return []
        return step_view_updates(trace, step, theme, len(self.view_slots) - 1)

    @property
    def views(self) -> list[gr.Component]:
        """(text, distribution, waterfall, overview): what selecting a step redraws."""
        return [self.text, self.dist, self.water, self.over]

    def frame_updates(self, frame: Frame | None, theme: str) -> list[Any]:
        """[status, *views] for a streamed frame; charts only when the frame carries them."""
        if frame is None:
            return [gr.skip()] * 5
        figs = [plot_value(f, theme) for f in frame.figures] if frame.figures else [gr.skip()] * 3
        return [frame.status, frame.html, *figs]

    def select_updates(self, trace: dict[str, Any] | None, k: Any, show_prompt: bool, theme: str) -> list[Any]:
        picked = select_step(trace, k, show_prompt, compact=self.compact)
        return [picked[0], *(plot_value(f, theme) for f in picked[1:])] if picked else [gr.skip()] * 4

    def stopped_updates(self, trace: dict[str, Any] | None, show_prompt: bool, theme: str) -> list[Any]:
        """[status, *views] after Stop: the partial run is final, drawn at its last step."""
        if not trace or not trace.get("steps"):
            return [gr.skip()] * 5
        return [status_html(stopped(trace), final=True),
                *self.select_updates(trace, len(trace["steps"]) - 1, show_prompt, theme)]


def step_view_updates(trace: dict[str, Any] | None, step: Any, theme: str, plots: int = VIEW_PLOTS) -> list[Any]:
    """The strategy views redrawn for a newly selected step (a per-step view follows the slider)."""
    k = clamp_step(trace, step)
    return view_updates(strategy_views(trace, k) if trace and k is not None else None, theme, plots)


def view_updates(views: list[View] | None, theme: str, plots: int = VIEW_PLOTS) -> list[Any]:
    """Fill ``plots`` figure slots and one HTML slot from what the trace carries; hide the unused ones."""
    if views is None:
        return [gr.skip()] * (plots + 1)
    drawn = [v for v in views if v.figure is not None]
    figs, left_out = drawn[:plots], drawn[plots:]
    html_parts = [f'<div class="pg-view"><h3>{escape(v.title)}</h3>{v.html}</div>' for v in views if v.html]
    if left_out:  # never a silent drop: the views past the page's slots are named
        html_parts.append(f'<p>{len(left_out)} more view{"s" if len(left_out) > 1 else ""} of this '
                          f'run than this panel shows: {escape("; ".join(v.title for v in left_out))}</p>')
    out: list[Any] = [gr.update(value=plot_value(v.figure, theme), label=v.title, visible=True) for v in figs]
    out += [gr.update(visible=False)] * (plots - len(figs))
    out.append(gr.update(value="".join(html_parts), visible=bool(html_parts)))
    return out
