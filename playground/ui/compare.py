"""The Compare tab: the sidebar's strategy (A) and another (B) on the same model, prompt and seed,
side by side; one step slider (and token clicks) select the step on both sides."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr

from playground.ui import events
from playground.ui.components import run_config
from playground.ui.controls import grammar_request
from playground.ui.controls import build_panel, default_strategy, strategies_in_order, strategy_summary
from playground.ui.events import MODEL_EVENT, QUIET, chat_flag, event_data, handler
from playground.ui.handlers import compare, show_prompt
from playground.ui.side import COMPARE_VIEW_PLOTS, Side, view_updates

if TYPE_CHECKING:
    from playground.models import ModelStore
    from playground.ui.components import Page
    from playground.ui.handlers import Decoder


def tab(page: Page) -> None:
    """The Compare tab's components: strategy B and its parameters, then the two sides."""
    names, default = [s.name for s in strategies_in_order()], default_strategy("greedy")
    gr.Markdown("Strategy **A** is the one in the sidebar; pick **B** here. Both get the same model, prompt, seed "
                "and budget.", elem_classes=["pg-summary"])
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=280):
            page.compare_strategy = gr.Dropdown(names, value=default, label="Strategy B",
                                                elem_id="pg-compare-strategy")
            page.compare_summary = gr.Markdown(strategy_summary(default), elem_classes=["pg-summary"])
        with gr.Column(scale=2):
            page.compare_panel = build_panel("b", default)
    page.compare_run = gr.Button("Run A and B", variant="primary", elem_id="pg-compare-run")
    page.compare_step = gr.Slider(0, 1, value=0, step=1, label="Step shown below (both sides)",
                                  elem_id="pg-compare-step")
    page.sides = {}
    with gr.Row(equal_height=False):
        for key in ("a", "b"):
            with gr.Column(min_width=360):
                page.sides[key] = Side(key, compact=True)


def wire(page: Page, store: ModelStore, decode: Decoder) -> Any:
    """Run A and B side by side; one step slider (and token clicks) select the step on both sides."""
    sides = [page.sides["a"], page.sides["b"]]
    states = [page.traces["a"], page.traces["b"]]
    side_outputs = [c for side in sides for c in (side.status, *side.views)]
    view_outputs = [c for side in sides for c in side.view_slots]

    def run_compare(*values: Any, progress: Any = None) -> Iterator[list[Any]]:
        cfg, seed_update, theme = run_config(page, values)
        dtype = cfg.pop("dtype")
        for k, (fa, fb) in enumerate(compare(store, cfg["model"], cfg["prompt"], cfg["strategy"], cfg["params"],
                              cfg["compare_strategy"], cfg["compare_params"], cfg["seed"], cfg["max_new_tokens"],
                              cfg["system"], chat_flag(cfg["model"], cfg["chat"]),
                              progress=events.progress(progress), decoder=decode, dtype=dtype,
                              grammar=grammar_request(cfg["grammar_kind"], cfg["grammar_text"]))):
            n = max(len((f.trace.get("steps") if f else None) or []) for f in (fa, fb))
            done = all(f is None or f.final for f in (fa, fb))
            views = [u for side, f in zip(sides, (fa, fb))
                     for u in (view_updates(f.views if f else None, theme, COMPARE_VIEW_PLOTS))]
            yield [*sides[0].frame_updates(fa, theme), *sides[1].frame_updates(fb, theme), *views,
                   gr.update(maximum=max(1, n - 1), value=0 if done else max(n - 1, 0)),
                   fa.trace if fa else gr.skip(), fb.trace if fb else gr.skip(), seed_update if k == 0 else gr.skip()]

    def on_select(a: dict[str, Any] | None, b: dict[str, Any] | None, k: Any, model: str, chat: Any,
                  theme: str) -> list[Any]:
        out: list[Any] = []
        for side, trace in zip(sides, (a, b)):
            out += [gr.skip(), *side.select_updates(trace, k, show_prompt(model, chat), theme)]
        return out + [u for side, trace in zip(sides, (a, b)) for u in side.view_updates(trace, k, theme)]

    def on_click(a: dict[str, Any] | None, b: dict[str, Any] | None, model: str, chat: Any, theme: str,
                 evt: gr.EventData) -> list[Any]:
        k = int(event_data(evt).get("step", 0))
        return [gr.update(value=k), *on_select(a, b, k, model, chat, theme)]

    outputs = [*side_outputs, *view_outputs, page.compare_step, *states, page.seed]
    event = page.compare_run.click(handler(run_compare, len(page.run_inputs), True, status=sides[0].status), page.run_inputs,
                                   outputs, api_name="compare", api_visibility="undocumented", show_progress="full",
                                   show_progress_on=[s.text for s in sides], **MODEL_EVENT)
    page.compare_step.input(on_select, [*states, page.compare_step, page.model, page.chat, page.theme],
                            [*side_outputs, *view_outputs],
                            trigger_mode="always_last", **QUIET)
    for side in sides:
        side.text.click(on_click, [*states, page.model, page.chat, page.theme],
                        [page.compare_step, *side_outputs, *view_outputs],
                        trigger_mode="always_last", **QUIET)
    return event
