"""The Compare tab: the sidebar's strategy (A) and another (B) on the same model, prompt and seed,
side by side; one step slider (and token clicks) select the step on both sides."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr

from playground.errors import InvalidRequest
from playground.ui import events
from playground.ui.components import run_config, run_request
from playground.ui.controls import build_panel, default_strategy, strategies_in_order, strategy_summary
from playground.ui.events import MODEL_EVENT, QUIET, SHOW_OUTPUT_JS, Updates, event_data, handler, keyed
from playground.ui.handlers import compare, show_prompt, side_refused
from playground.ui.side import COMPARE_VIEW_PLOTS, VIEW_PREFIX, Side, slot_ids

if TYPE_CHECKING:
    from playground.models import ModelStore
    from playground.ui.components import Shared
    from playground.ui.handlers import Decoder, Frame

SIDES = ("a", "b")


def side_rows(key: str) -> list[str]:
    """The element ids of a Compare side's parts, top to bottom: one grid row each."""
    plots, html = slot_ids(COMPARE_VIEW_PLOTS, VIEW_PREFIX, f"-{key}")
    return [f"pg-status-{key}", f"pg-text-{key}", f"pg-overview-{key}", f"pg-dist-{key}", f"pg-waterfall-{key}",
            *plots, html]


# Side A's and side B's parts share rows, so their charts start level however many lines either side's
# status or text takes: the two columns give their children to one grid, each part to its own row. Where
# the page is too narrow for two columns they stack as before.
SIDES_CSS = ("@media (min-width: 1100px) {\n"
             "  #pg-compare-sides { display: grid !important; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr);"
             " column-gap: var(--layout-gap, 16px); row-gap: var(--layout-gap, 16px); align-items: start; }\n"
             + "".join(f"  #pg-compare-sides > #pg-side-{key} {{ display: contents; }}\n" for key in SIDES)
             + "".join(f"  #{part} {{ grid-column: {column}; grid-row: {row}; }}\n"
                       for column, key in enumerate(SIDES, 1) for row, part in enumerate(side_rows(key), 1))
             + "}\n")


class Compare:
    """The tab's components (``layout``, inside its gr.Tab) and its events (``wire``); ``event`` is its run,
    which Stop cancels."""

    tab: gr.Tab  # set by the page, which builds the tab around ``layout``

    def layout(self) -> None:
        """Strategy B and its parameters, the run button and step slider, then the two sides."""
        names, default = [s.name for s in strategies_in_order()], default_strategy("greedy")
        gr.Markdown("Strategy **A** is the one in the sidebar; pick **B** here. Both get the same model, prompt, "
                    "seed and budget.", elem_classes=["pg-summary"])
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=280):
                self.strategy = gr.Dropdown(names, value=default, label="Strategy B", elem_id="pg-compare-strategy")
                self.summary = gr.Markdown(strategy_summary(default), elem_classes=["pg-summary"])
            with gr.Column(scale=2):
                self.panel = build_panel("b", default)
        # enabled with Generate once the page's load event has restored a link's settings (page._wire_share)
        self.run = gr.Button("Run A and B", variant="primary", elem_id="pg-compare-run", interactive=False)
        self.step = gr.Slider(0, 1, value=0, step=1, label="Step shown below (both sides)", elem_id="pg-compare-step")
        self.sides: dict[str, Side] = {}
        with gr.Row(equal_height=False, elem_id="pg-compare-sides"):  # SIDES_CSS lines up its rows
            for key in SIDES:
                with gr.Column(min_width=360, elem_id=f"pg-side-{key}"):
                    self.sides[key] = Side(key, compact=True)

    def wire(self, shared: Shared, store: ModelStore, decode: Decoder) -> None:
        """Run A and B side by side; one step slider (and token clicks) select the step on both sides."""
        self.shared = shared
        sides, states = [self.sides["a"], self.sides["b"]], [shared.traces["a"], shared.traces["b"]]
        side_outputs = [c for side in sides for c in (side.status, *side.views)]
        view_outputs = [c for side in sides if side.view_slots for c in side.view_slots.components]

        def run_compare(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
            cfg, seed_update, theme = run_config(shared, values)
            try:
                a = run_request(cfg)
            except InvalidRequest as err:  # what both sides share is refused as side A's, where it shows first
                raise side_refused("A", cfg["strategy"], err) from None
            b = dataclasses.replace(a, strategy=cfg["compare_strategy"], params=dict(cfg["compare_params"]))
            yield from self.stream(compare(store, a, b, progress=events.progress(progress), decoder=decode),
                                   theme, seed_update)

        def shown(values: dict[Any, Any], k: Any) -> dict[Any, Any]:
            a, b = (values[state] for state in states)
            return self.select(a, b, k, values[shared.model], values[shared.chat], values[shared.theme])

        def on_select(values: dict[Any, Any]) -> Any:
            return keyed(shown(values, values[self.step]))

        def on_click(values: dict[Any, Any], evt: gr.EventData) -> Any:
            k = int(event_data(evt).get("step", 0))
            return keyed({self.step: gr.update(value=k), **shown(values, k)})

        outputs = [*side_outputs, *view_outputs, self.step, *states, shared.seed]
        self.event = self.run.click(handler(run_compare, 1, True, status=sides[0].status), shared.run_inputs,
                                    outputs, api_name="compare", api_visibility="undocumented", show_progress="full",
                                    show_progress_on=[s.text for s in sides], **MODEL_EVENT)
        self.run.click(None, None, None, js=SHOW_OUTPUT_JS % "pg-status-a", api_visibility="private")
        view_inputs: set[Any] = {*states, shared.model, shared.chat, shared.theme}
        self.step.input(on_select, {self.step, *view_inputs}, [*side_outputs, *view_outputs],
                        trigger_mode="always_last", **QUIET)
        for side in sides:
            side.text.click(on_click, view_inputs, [self.step, *side_outputs, *view_outputs],
                            trigger_mode="always_last", **QUIET)

    def stream(self, runs: Iterator[tuple[Frame | None, Frame | None]], theme: str, seed_update: Any) -> Iterator[Any]:
        """compare's pairs of frames as updates of both sides (a side that made no new frame is not redrawn),
        the step slider following the run, the seed update with the first."""
        sides, states = [self.sides["a"], self.sides["b"]], [self.shared.traces["a"], self.shared.traces["b"]]
        unsent = events.Unsent()
        shown: list[Frame | None] = [None, None]
        for k, frames in enumerate(runs):
            n = max(len((f.trace.get("steps") if f else None) or []) for f in frames)
            done = all(f is None or f.final for f in frames)
            out: Updates = {}
            for i, (side, state, f) in enumerate(zip(sides, states, frames)):
                if f is shown[i]:  # this side made no new frame (it ended, or waits its turn): nothing to redraw
                    continue
                shown[i] = f
                out.update(side.frame_updates(f, theme))
                if side.view_slots and f:
                    out.update(side.view_slots.updates(f.views, theme))
                if f:
                    out[state] = f.trace
            out[self.step] = gr.update(maximum=max(1, n - 1), value=0 if done else max(n - 1, 0))
            if k == 0:
                out[self.shared.seed] = seed_update
            yield keyed(unsent(out))

    def select(self, a: dict[str, Any] | None, b: dict[str, Any] | None, k: Any, model: str, chat: Any,
               theme: str) -> Updates:
        """Both sides' views at step ``k``."""
        out: Updates = {}
        for side, trace in zip((self.sides["a"], self.sides["b"]), (a, b)):
            out.update(side.select_updates(trace, k, show_prompt(model, chat), theme))
            out.update(side.view_updates(trace, k, theme))
        return out
