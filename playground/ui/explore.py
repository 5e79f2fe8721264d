"""The Explore tab: one run streamed into the text and the step charts; Generate, Stop, and step
selection by slider, token click or overview click. Its branches panel is playground.ui.branches."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr

from playground.charts.steps import clamp_step
from playground.ui import branches, events
from playground.ui.components import run_config, run_request
from playground.ui.events import MODEL_EVENT, QUIET, Updates, event_data, handler, keyed
from playground.ui.export import export_pngs, png_export_available, write_trace_json
from playground.ui.handlers import generate, show_prompt, status_html, stopped
from playground.ui.side import VIEW_PLOTS, VIEW_PREFIX, Side, ViewSlots
from playground.whatif.lens import lens
from strategies.forcing import parse_path

if TYPE_CHECKING:
    from playground.models import ModelStore
    from playground.ui.components import Page
    from playground.ui.handlers import Decoder, Frame


def tab(page: Page) -> None:
    """The Explore tab's components: the run's column, its step slider, branches, views and export."""
    page.main = Side("main", compact=False)
    assert page.main.step_slot is not None
    with page.main.step_slot:
        page.step = gr.Slider(0, 1, value=0, step=1, label="Step shown below", elem_id="pg-step",
                              info="Drag, click a token or a bar above to inspect that step.")
        page.lens = gr.Button("Read every layer at this step (logit lens)", size="sm", elem_id="pg-lens")
    # a strategy's own views sit right under the text, where a person reads the run
    assert page.main.view_slot is not None
    with page.main.view_slot:
        page.view_slots = ViewSlots.make(VIEW_PLOTS, VIEW_PREFIX)
    page.branches = branches.layout()
    page.forced = page.branches.forced
    with gr.Accordion("Export", open=False, elem_id="pg-export"):
        page.trace_file = gr.File(label="Trace JSON (the exact record of the run)", elem_id="pg-trace-file")
        page.png = gr.Button("Render the charts as PNG on the server", size="sm", visible=png_export_available(),
                             elem_id="pg-png")
        page.png_files = gr.File(label="Chart PNGs", file_count="multiple", elem_id="pg-png-files")


def wire(page: Page, store: ModelStore, decode: Decoder, compare_event: Any) -> None:
    """Generate (streamed), Stop (which also ends a compare run), and step selection by slider,
    token click or overview click."""
    main, slots = page.main, page.view_slots
    outputs = [main.status, main.text, page.step, *main.charts, *slots.components, page.trace, page.trace_file,
               page.png_files, page.seed, *page.panel.filled]

    def run_explore(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
        cfg, seed_update, theme = run_config(page, values)
        forced = parse_path(cfg["forced"])
        yield from stream_frames(generate(store, run_request(cfg, forced), progress=events.progress(progress),
                                          decoder=decode, final_step=max(forced) if forced else "uncertain"),
                                 theme, seed_update)

    def stream_frames(frames: Iterator[Frame], theme: str, seed_update: Any = None) -> Iterator[Any]:
        """generate's frames as updates of ``outputs`` (a run's seed update goes out with its first frame,
        what it filled in with its last). What equals the run's last update of a component is not sent again."""
        unsent = events.Unsent()
        for k, frame in enumerate(frames):
            if not frame.final and (frame.figures or frame.views) and events.stop_requested():
                frame = dataclasses.replace(frame, figures=None, views=None)  # Stop first: no charts to convert
            n = len(frame.trace.get("steps") or [])
            out: Updates = {**main.frame_updates(frame, theme),
                            page.step: gr.update(maximum=max(1, n - 1), value=frame.step or 0),
                            **slots.updates(frame.views, theme), page.trace: frame.trace}
            if k == 0:  # the previous run's download and PNGs are cleared on the first token
                out.update({page.trace_file: None, page.png_files: None})
                if seed_update is not None:
                    out[page.seed] = seed_update
            if frame.final:  # the download is filled at the end, and what the run filled in written back
                out[page.trace_file] = write_trace_json(frame.trace)
                out.update(page.panel.filled_updates(frame.trace))
            yield keyed(unsent(out))

    def on_stopped(trace: dict[str, Any] | None, a: dict[str, Any] | None, b: dict[str, Any] | None,
                   model: str, chat: Any, theme: str) -> Any:
        """After Stop: every partial run (Explore's, or both Compare sides) is final, drawn at its last step."""
        show = show_prompt(model, chat)
        out = {**main.stopped_updates(trace, show, theme), **page.sides["a"].stopped_updates(a, show, theme),
               **page.sides["b"].stopped_updates(b, show, theme)}
        if trace and trace.get("steps"):
            out[page.trace_file] = write_trace_json(stopped(trace))
        return keyed(out)

    def on_stopped_status(trace: dict[str, Any] | None, a: dict[str, Any] | None, b: dict[str, Any] | None,
                          model: str, chat: Any) -> Any:
        """After Stop, before the charts: each partial run's status and text say where it stopped."""
        show = show_prompt(model, chat)
        return keyed({**main.stopped_status(trace, show), **page.sides["a"].stopped_status(a, show),
                      **page.sides["b"].stopped_status(b, show)})

    def select(trace: dict[str, Any] | None, k: Any, model: str, chat: Any, theme: str) -> Updates:
        """The Explore views and the strategy's own at step ``k``."""
        return {**main.select_updates(trace, k, show_prompt(model, chat), theme),
                **slots.step_updates(trace, k, theme)}

    def on_token_click(trace: dict[str, Any] | None, model: str, chat: Any, theme: str,
                       evt: gr.EventData) -> Any:
        k = clamp_step(trace, event_data(evt).get("step", 0))
        if k is None:
            return keyed({})
        return keyed({page.step: gr.update(value=k), **select(trace, k, model, chat, theme)})

    def show_trace(trace: dict[str, Any], k: Any, model: str, chat: Any, theme: str) -> Updates:
        """A stored (finished) trace drawn into the Explore views at step ``k``."""
        k = clamp_step(trace, k) or 0
        n = len(trace.get("steps") or [])
        return {main.status: status_html(trace, final=True), page.step: gr.update(maximum=max(1, n - 1), value=k),
                **select(trace, k, model, chat, theme), page.trace: trace, page.trace_file: write_trace_json(trace)}

    def on_step(trace: dict[str, Any] | None, k: Any, model: str, chat: Any, theme: str) -> Any:
        return keyed(select(trace, k, model, chat, theme))

    event = gr.on([page.generate.click, page.prompt.submit], handler(run_explore, 1, True, status=main.status),
                  page.run_inputs, outputs, api_name="explore", api_visibility="undocumented",
                  show_progress="full", show_progress_on=[main.text], **MODEL_EVENT)
    panel = page.branches
    # a restored link's branch runs once its parent has joined the tree
    event.success(panel.on_run, [page.trace, panel.state],
                  [panel.tree, panel.view, panel.state, panel.forced], **QUIET).then(
        panel.take_pending, [page.trace, panel.pending], [panel.go, panel.pending], **QUIET)
    show_outputs = [main.status, main.text, page.step, *main.charts, *slots.components, page.trace, page.trace_file]
    branch_events = branches.wire(page, panel, store, decode, stream_frames, outputs, show_trace, show_outputs)
    step_outputs = [*main.views, *slots.components]
    page.step.input(on_step, [page.trace, page.step, page.model, page.chat, page.theme], step_outputs,
                    trigger_mode="always_last", **QUIET)
    # a click while the last one is still drawing is not dropped: the latest click wins
    main.text.click(on_token_click, [page.trace, page.model, page.chat, page.theme], [page.step, *step_outputs],
                    trigger_mode="always_last", **QUIET)
    def on_lens(trace: dict[str, Any] | None, k: Any, theme: str, progress: Any = None) -> Iterator[Any]:
        """The logit lens of the shown step, added to the run's trace and drawn with its views."""
        record = lens(store, trace or {}, clamp_step(trace, k) if trace else k, progress=events.progress(progress))
        kept = [r for r in (trace or {}).get("lens") or [] if r.get("step") != record["step"]]
        trace = {**(trace or {}), "lens": [*kept, record]}
        yield keyed({page.trace: trace, page.trace_file: write_trace_json(trace),
                     **slots.step_updates(trace, record["step"], theme)})

    page.lens.click(handler(on_lens, 3, True, status=main.status), [page.trace, page.step, page.theme],
                    [page.trace, page.trace_file, *slots.components, main.status], show_progress="minimal",
                    api_visibility="private")
    page.png.click(handler(lambda trace, k, theme: iter([export_pngs(trace, k, theme)]), 3),
                   [page.trace, page.step, page.theme],
                   page.png_files, api_visibility="private")
    # Stop cancels between two steps (the engine yields after every token), then settles the page
    side_views = [c for key in ("a", "b") for c in (page.sides[key].status, *page.sides[key].views)]
    # (the handler's run also reads Stop between two frames; cancelling the events drops the frames the
    # browser has not drawn yet, so the page stops at once instead of catching up)
    page.stop.click(events.request_stop, None, None, queue=False, cancels=[event, compare_event, *branch_events],
                    api_visibility="private").then(
        on_stopped_status, [page.trace, page.traces["a"], page.traces["b"], page.model, page.chat],
        [main.status, main.text, *(c for key in ("a", "b") for c in (page.sides[key].status, page.sides[key].text))],
        **QUIET).then(
        on_stopped, [page.trace, page.traces["a"], page.traces["b"], page.model, page.chat, page.theme],
        [main.status, *main.views, page.trace_file, *side_views], **QUIET).then(
        lambda trace, tree: keyed(panel.after_stop(trace, tree, page.trace)), [page.trace, panel.state],
        [panel.tree, panel.view, panel.state, panel.forced, page.trace], **QUIET).then(lambda: None, None, panel.pending, **QUIET)  # a stopped link's run takes no branch after it
    # whether a bar click branches: said under the chart and in the panel, for the strategy picked
    assert main.dist_note is not None
    note = main.dist_note
    page.strategy.change(lambda strategy: panel.strategy_updates(strategy, note), page.strategy,
                         [note, panel.hint, panel.run], **QUIET)
