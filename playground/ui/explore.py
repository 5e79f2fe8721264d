"""The Explore tab: one run streamed into the text and the step charts; Generate, Stop, and step
selection by slider, token click or overview click. Its branches panel is playground.ui.branches."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr

from playground.charts.lens import lens_at, lens_figure
from playground.charts.steps import clamp_step
from playground.ui import branches, events
from playground.ui.components import run_config, run_request
from playground.ui.events import (
    MODEL_EVENT,
    QUIET,
    SHOW_OUTPUT_JS,
    Updates,
    event_data,
    handler,
    keyed,
    plot_component,
    plot_value,
)
from playground.ui.export import export_pngs, png_export_available, write_trace_json
from playground.ui.handlers import generate, show_prompt, status_html, stopped
from playground.ui.side import VIEW_PLOTS, VIEW_PREFIX, Side, ViewSlots
from playground.whatif.lens import lens
from strategies.forcing import parse_path

if TYPE_CHECKING:
    from playground.models import ModelStore
    from playground.ui.compare import Compare
    from playground.ui.components import Shared
    from playground.ui.handlers import Decoder, Frame


LENS_AFTER_JS = """(run) => {
  if (String(run || '').split(',').includes('lens')) setTimeout(() => document.getElementById('pg-lens')?.click(), 50);
  return '';
}"""


class Explore:
    """The tab's components (``layout``, inside its gr.Tab) and its events (``wire``)."""

    tab: gr.Tab  # set by the page, which builds the tab around ``layout``

    def layout(self) -> None:
        """The run's column, its step slider, the strategy's views, branches and export."""
        self.main = Side("main", compact=False)
        assert self.main.step_slot is not None and self.main.view_slot is not None
        with self.main.step_slot:
            self.step = gr.Slider(0, 1, value=0, step=1, label="Step shown below", elem_id="pg-step",
                                  info="Drag, click a token or a bar above to inspect that step.")
            self.lens = gr.Button("Read every layer at this step (logit lens)", size="sm", elem_id="pg-lens")
            # the lens's chart right under its button, where the person who asked for it is looking
            self.lens_plot = plot_component(visible=False, show_label=False, elem_id="pg-lens-plot")
        # a strategy's own views sit right under the text, where a person reads the run
        with self.main.view_slot:
            self.slots = ViewSlots.make(VIEW_PLOTS, VIEW_PREFIX)
        self.branches = branches.layout()
        with gr.Accordion("Export", open=False, elem_id="pg-export") as self.export:  # the page adds Copy as
            self.trace_file = gr.File(label="Trace JSON (the exact record of the run)", elem_id="pg-trace-file")
            self.png = gr.Button("Render the charts as PNG on the server", size="sm",
                                 visible=png_export_available(), elem_id="pg-png")
            self.png_files = gr.File(label="Chart PNGs", file_count="multiple", elem_id="pg-png-files")

    def wire(self, shared: Shared, store: ModelStore, decode: Decoder, compare: Compare) -> None:
        """Generate (streamed), Stop (which also ends a compare run), step selection, the lens, PNGs."""
        self.shared, self.store = shared, store
        self.outputs = [self.main.status, self.main.text, self.step, *self.main.charts, *self.slots.components,
                        shared.trace, self.trace_file, self.png_files, shared.seed, *shared.panel.filled,
                        self.lens_plot]
        self.show_outputs = [self.main.status, self.main.text, self.step, *self.main.charts,
                             *self.slots.components, self.lens_plot, shared.trace, self.trace_file]

        def run_explore(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
            cfg, seed_update, theme = run_config(shared, values)
            forced = parse_path(cfg["forced"])
            yield from self.stream_frames(generate(store, run_request(cfg, forced), progress=events.progress(progress),
                                                   decoder=decode, final_step=max(forced) if forced else "uncertain"),
                                          theme, seed_update)

        event = gr.on([shared.generate.click, shared.prompt.submit],
                      handler(run_explore, 1, True, status=self.main.status), shared.run_inputs, self.outputs,
                      api_name="explore", api_visibility="undocumented", show_progress="full",
                      show_progress_on=[self.main.text], **MODEL_EVENT)
        gr.on([shared.generate.click, shared.prompt.submit], None, None, None, js=SHOW_OUTPUT_JS % "pg-status",
              api_visibility="private")
        # an example that reads its run with the lens (run flag "lens") asks for it once the run is done; the
        # flag is spent, so the next Generate is a plain run
        event.success(None, shared.run_flag, shared.run_flag, js=LENS_AFTER_JS, **QUIET)
        panel = self.branches
        # a restored link's branch runs once its parent has joined the tree
        event.success(panel.on_run, [shared.trace, panel.state],
                      [panel.tree, panel.view, panel.state, panel.forced], **QUIET).then(
            panel.take_pending, [shared.trace, panel.pending], [panel.go, panel.pending], **QUIET)
        branch_events = branches.wire(shared, self, store, decode)
        self._wire_steps()
        self._wire_stop([event, compare.event, *branch_events], compare)
        # whether a bar click branches: said under the chart and in the panel, for the strategy picked
        assert self.main.dist_note is not None
        note = self.main.dist_note
        shared.strategy.change(lambda strategy: panel.strategy_updates(strategy, note), shared.strategy,
                               [note, panel.hint, panel.run], **QUIET)

    def stream_frames(self, frames: Iterator[Frame], theme: str, seed_update: Any = None) -> Iterator[Any]:
        """generate's frames as updates of ``outputs`` (a run's seed update goes out with its first frame,
        what it filled in with its last). What equals the run's last update of a component is not sent again."""
        unsent = events.Unsent()
        for k, frame in enumerate(frames):
            if not frame.final and (frame.figures or frame.views) and events.stop_requested():
                frame = dataclasses.replace(frame, figures=None, views=None)  # Stop first: no charts to convert
            n = len(frame.trace.get("steps") or [])
            out: Updates = {**self.main.frame_updates(frame, theme),
                            self.step: gr.update(maximum=max(1, n - 1), value=frame.step or 0),
                            **self.slots.updates(frame.views, theme), self.shared.trace: frame.trace}
            if k == 0:  # the previous run's download, PNGs and lens are cleared on the first token
                out.update({self.trace_file: None, self.png_files: None, self.lens_plot: gr.update(visible=False)})
                if seed_update is not None:
                    out[self.shared.seed] = seed_update
            if frame.final:  # the download is filled at the end, and what the run filled in written back
                out[self.trace_file] = write_trace_json(frame.trace)
                out.update(self.shared.panel.filled_updates(frame.trace))
            yield keyed(unsent(out))

    def select(self, trace: dict[str, Any] | None, k: Any, model: str, chat: Any, theme: str) -> Updates:
        """The Explore views and the strategy's own at step ``k``, the lens of that step (if read) under
        its button."""
        lensless = {key: v for key, v in trace.items() if key != "lens"} if trace else trace
        return {**self.main.select_updates(trace, k, show_prompt(model, chat), theme),
                **self.slots.step_updates(lensless, k, theme), **self.lens_updates(trace, k, theme)}

    def lens_updates(self, trace: dict[str, Any] | None, k: Any, theme: str) -> Updates:
        """The lens chart of step ``k``, shown under the lens button when the trace carries that step's
        record, hidden when not (nothing without a trace)."""
        if not trace:
            return {}
        record = lens_at(trace, clamp_step(trace, k))
        if record is None:
            return {self.lens_plot: gr.update(visible=False)}
        return {self.lens_plot: gr.update(value=plot_value(lens_figure(record), theme), visible=True)}

    def show_trace(self, trace: dict[str, Any], k: Any, model: str, chat: Any, theme: str) -> Updates:
        """A stored (finished) trace drawn into the Explore views at step ``k`` (``show_outputs``)."""
        k = clamp_step(trace, k) or 0
        n = len(trace.get("steps") or [])
        return {self.main.status: status_html(trace, final=True), self.step: gr.update(maximum=max(1, n - 1), value=k),
                **self.select(trace, k, model, chat, theme), self.shared.trace: trace,
                self.trace_file: write_trace_json(trace)}

    def _wire_steps(self) -> None:
        """The step slider, a token's click, the logit lens and the PNG export."""
        shared, slots = self.shared, self.slots
        step_outputs = [*self.main.views, *slots.components, self.lens_plot]
        view_inputs: set[Any] = {shared.trace, shared.model, shared.chat, shared.theme}

        def shown(values: dict[Any, Any], k: Any) -> dict[Any, Any]:
            return self.select(values[shared.trace], k, values[shared.model], values[shared.chat], values[shared.theme])

        def on_step(values: dict[Any, Any]) -> Any:
            return keyed(shown(values, values[self.step]))

        def on_token_click(values: dict[Any, Any], evt: gr.EventData) -> Any:
            k = clamp_step(values[shared.trace], event_data(evt).get("step", 0))
            if k is None:
                return keyed({})
            return keyed({self.step: gr.update(value=k), **shown(values, k)})

        def on_lens(trace: dict[str, Any] | None, k: Any, theme: str, progress: Any = None) -> Iterator[Any]:
            """The logit lens of the shown step, added to the run's trace and drawn under the button."""
            record = lens(self.store, trace or {}, clamp_step(trace, k) if trace else k,
                          progress=events.progress(progress))
            kept = [r for r in (trace or {}).get("lens") or [] if r.get("step") != record["step"]]
            trace = {**(trace or {}), "lens": [*kept, record]}
            yield keyed({shared.trace: trace, self.trace_file: write_trace_json(trace),
                         **self.lens_updates(trace, record["step"], theme)})

        self.step.input(on_step, {self.step, *view_inputs}, step_outputs, trigger_mode="always_last", **QUIET)
        # a click while the last one is still drawing is not dropped: the latest click wins
        self.main.text.click(on_token_click, view_inputs, [self.step, *step_outputs], trigger_mode="always_last",
                             **QUIET)
        self.lens.click(handler(on_lens, 3, True, status=self.main.status), [shared.trace, self.step, shared.theme],
                        [shared.trace, self.trace_file, self.lens_plot, self.main.status], show_progress="minimal",
                        api_visibility="private")
        self.png.click(handler(lambda trace, k, theme: iter([export_pngs(trace, k, theme)]), 3),
                       [shared.trace, self.step, shared.theme], self.png_files, api_visibility="private")

    def _wire_stop(self, cancels: list[Any], compare: Compare) -> None:
        """Stop cancels between two steps (the engine yields after every token), then settles the page: every
        partial run (Explore's, or both Compare sides) final, drawn at its last step, and joined to the tree."""
        shared, main, panel, sides = self.shared, self.main, self.branches, compare.sides
        reads = {shared.trace, shared.traces["a"], shared.traces["b"], shared.model, shared.chat, shared.theme}

        def on_stopped(values: dict[Any, Any]) -> Any:
            show, theme, trace = show_prompt(values[shared.model], values[shared.chat]), values[shared.theme], values[shared.trace]
            out = {**main.stopped_updates(trace, show, theme),
                   **sides["a"].stopped_updates(values[shared.traces["a"]], show, theme),
                   **sides["b"].stopped_updates(values[shared.traces["b"]], show, theme)}
            if trace and trace.get("steps"):
                out[self.trace_file] = write_trace_json(stopped(trace))
            return keyed(out)

        def on_stopped_status(values: dict[Any, Any]) -> Any:
            """After Stop, before the charts: each partial run's status and text say where it stopped."""
            show = show_prompt(values[shared.model], values[shared.chat])
            return keyed({**main.stopped_status(values[shared.trace], show),
                          **sides["a"].stopped_status(values[shared.traces["a"]], show),
                          **sides["b"].stopped_status(values[shared.traces["b"]], show)})

        side_views = [c for key in ("a", "b") for c in (sides[key].status, *sides[key].views)]
        side_text = [c for key in ("a", "b") for c in (sides[key].status, sides[key].text)]
        # (the handler's run also reads Stop between two frames; cancelling the events drops the frames the
        # browser has not drawn yet, so the page stops at once instead of catching up)
        shared.stop.click(events.request_stop, None, None, queue=False, cancels=cancels,
                          api_visibility="private").then(
            on_stopped_status, reads, [main.status, main.text, *side_text], **QUIET).then(
            on_stopped, reads, [main.status, *main.views, self.trace_file, *side_views], **QUIET).then(
            lambda trace, tree: keyed(panel.after_stop(trace, tree, shared.trace)), [shared.trace, panel.state],
            [panel.tree, panel.view, panel.state, panel.forced, shared.trace], **QUIET).then(
            lambda: None, None, panel.pending, **QUIET)  # a stopped link's run takes no branch after it
