"""The Gradio page: its header, the top row and the sidebar, the tabs, and the wiring between them.

The room, from the bottom up: ``events`` (what every event shares), ``controls`` (the strategy
controls generated from the registry), ``handlers`` (plain functions: primitives in, text and
figures out, tested without a browser), ``side`` (a run's output column), ``components`` (the
page's components as one object, and its configuration), then the tabs (``explore``,
``compare``, ``whatif``, with ``branches``), ``export``, ``api`` and ``examples``; this module
builds the page from them.

Serving: one ModelStore is passed in (no module-global model); every model event shares the
concurrency group ``model`` with limit 1 on top of the store's lock (``events.MODEL_EVENT``).
"""
from __future__ import annotations

# first: handlers imports `spaces` (ZeroGPU) before anything imports torch
from playground.ui.handlers import DEFAULT_PROMPT, default_decoder, restore  # isort: skip

import importlib.util
import json
from typing import TYPE_CHECKING, Any

import gradio as gr

from playground import ASSETS
from playground.charts.common import counted
from playground.engine import MAX_SEED
from playground.errors import InvalidRequest
from playground.models import DEFAULT_MODEL, MAX_NEW_TOKENS
from playground.models.dtypes import DEFAULT_DTYPE, DTYPES
from playground.ui import api, share, whatif
from playground.ui.compare import SIDES_CSS, Compare
from playground.ui.components import Carried, Shared, page_config, share_query
from playground.ui.controls import (
    GRAMMAR_CHOICES,
    GRAMMAR_HELP,
    GRAMMAR_NOTE,
    NO_GRAMMAR,
    build_panel,
    default_strategy,
    grammar_placeholder,
    model_choices,
    pair_update,
    strategies_in_order,
    strategy_summary,
)
from playground.ui.engines_panel import EnginesPanel
from playground.ui.events import QUIET, chat_flag, is_chat_model, keyed, no_progress_targets, refusal
from playground.ui.examples import example_run_key, examples, note_after, prompt_offer, prompt_on_model, toy_note
from playground.ui.explore import Explore
from playground.ui.side import VIEW_PLOTS, VIEW_PREFIX, slot_ids
from playground.ui.sweep_panel import sweep_link
from playground.whatif import branches

if TYPE_CHECKING:
    from playground.models import ModelStore
    from playground.ui.handlers import Decoder

QUEUE_MAX = 32
QUEUE_NOTE = ("One run at a time: this server keeps one model busy for one visitor. While others are "
              "generating, your run waits in the queue; its position shows over the text.")


HEADER = """<div class="pg-header">
  <h1>Decoding Playground</h1>
  <p>Type a prompt, pick a model and a decoding strategy, and watch what the decoder really did at each
  step: the distribution it drew from, what each truncation cut, and the token it chose.</p>
</div>"""


RUN_JS = """(run) => {
  const click = (id) => { const b = document.getElementById(id); if (b) b.click(); };
  // a What-if button comes into view (its output is drawn under it)
  const bring = (id) => document.getElementById(id)?.scrollIntoView({block: 'start'});
  const modes = String(run || '').split(',');
  if (modes.includes('generate')) setTimeout(() => click('pg-generate'), 50);
  if (modes.includes('compare')) setTimeout(() => click('pg-compare-run'), 250);
  // the lockstep's output is at the What-if tab's foot, some 3,000 px down: its button comes into view
  if (modes.includes('lockstep')) setTimeout(() => { click('pg-pair-run'); bring('pg-pair-run'); }, 400);
  if (modes.includes('sample')) setTimeout(() => { click('pg-whatif-sample'); bring('pg-whatif-sample'); }, 400);
  // Score's text is read, and with 'detect' its watermark detected: its button comes into view
  if (modes.includes('score')) setTimeout(() => { click('pg-whatif-score'); bring('pg-whatif-score'); }, 400);
  if (modes.includes('detect')) setTimeout(() => click('pg-whatif-detect'), 450);
  // a sweep's chart is under its button in the What-if tab: the button comes into view
  if (modes.includes('sweep')) setTimeout(() => { click('pg-sweep-run'); bring('pg-sweep-run'); }, 450);
  // the answer rules' table is under their button
  if (modes.includes('rules')) setTimeout(() => { click('pg-rules-run'); bring('pg-rules-run'); }, 450);
  return [];
}"""


PAGE_JS = """() => {
  // on a phone the strategy's parameters start folded, so the output follows Generate closely
  if (window.matchMedia('(max-width: 640px)').matches) {
    const head = document.querySelector('#pg-params > button.label-wrap.open');
    if (head) head.click();
  }
  // the theme the page shows (Gradio marks dark mode with a class) and its width: figures are drawn for them
  const dark = [document.documentElement, document.body, document.querySelector('gradio-app')]
    .some((el) => el && el.classList.contains('dark'));
  return (dark ? 'dark' : 'light') + ':' + window.innerWidth;
}"""

COPY_JS = """(query) => {
  if (!query) return query;
  const url = window.location.origin + window.location.pathname + query;
  try { navigator.clipboard.writeText(url).catch(() => {}); } catch (e) {}
  return url;
}"""


# short enough for a phone's first screen (Generate stays on it); hovering the model in the status line
# says which weights ran and why
WEIGHTS_INFO = "auto: int4, else bfloat16, else float32: the first this CPU runs that matches float32."

LOADS_WITH_MODEL = ("The model is not loaded yet: this shows the exact text it reads (the chat template and "
                    "any default system prompt it adds) and its token count once it loads with the model.")

# Slides view: the chosen chart alone at the screen's size (its plot's element id); Escape or the
# checkbox leaves it
VIEW_IDS, VIEW_HTML_ID = slot_ids(VIEW_PLOTS, VIEW_PREFIX)  # the Explore tab's strategy view slots
SLIDE_CHARTS = {"distribution": "pg-dist", "chain": "pg-waterfall", "overview": "pg-overview-main",
                "strategy view": VIEW_IDS[0]}
# hidden in the slides view whichever chart is chosen: the strategy's further views, as many as the page has
SLIDE_HIDDEN = [*VIEW_IDS[1:], VIEW_HTML_ID]
# The JS only marks the body (the view on, the chart chosen); CSS rules keyed to the element ids hide
# the rest, so a slot that appears after the view was switched on (Gradio renders a component once it
# is first shown) is hidden as well.
SLIDES_JS = """(on, chart) => {
  document.body.classList.toggle('pg-slides', !!on);
  document.body.dataset.pgSlide = chart || '';
  document.body.dataset.pgSlideId = (%s)[chart] || '';  // the chart playground.js sizes to the screen
  const explore = document.querySelector('#pg-tabs [role=tab]');  // the charts shown are the Explore tab's
  if (on && explore && explore.getAttribute('aria-selected') !== 'true') explore.click();
  setTimeout(() => window.dispatchEvent(new Event('resize')), 80);
  setTimeout(() => window.dispatchEvent(new Event('resize')), 400);
  return [];
}""" % json.dumps(SLIDE_CHARTS)
SLIDES_HIDING = ",\n".join(
    [f'body.pg-slides:not([data-pg-slide="{name}"]) #{element}' for name, element in SLIDE_CHARTS.items()]
    + [f"body.pg-slides #{element}" for element in SLIDE_HIDDEN]) + " { display: none !important; }\n"
# ... and in the Explore column everything but the chosen chart (with what holds it) and the bar that leaves
# the view; above it the header, the prompt and its buttons, and the sidebar
SLIDES_ALONE = ",\n".join(
    f'body.pg-slides[data-pg-slide="{name}"] #pg-main *:not(#{element}, #{element} *, :has(#{element}), '
    f'#pg-slides-bar, #pg-slides-bar *, :has(#pg-slides-bar))' for name, element in SLIDE_CHARTS.items())
SLIDES_CSS = SLIDES_HIDING + SLIDES_ALONE + """ { display: none !important; }
body.pg-slides .pg-header, body.pg-slides #pg-top, body.pg-slides #pg-sidebar, body.pg-slides footer,
body.pg-slides #pg-dist-note, body.pg-slides #pg-glossary { display: none !important; }
body.pg-slides #pg-main { flex: 1 1 100% !important; width: 100% !important; max-width: 100% !important; }
body.pg-slides #pg-main .modebar-container { display: none !important; }
body.pg-slides #pg-slides-bar { flex-wrap: nowrap; }
body.pg-slides .gradio-container, body.pg-slides .gradio-container > main, body.pg-slides .main {
  padding-top: 0.3rem !important; padding-bottom: 0 !important; margin-top: 0 !important; }
@media (min-width: 700px) {  /* projector sizes; a phone keeps its own */
  body.pg-slides #pg-main .js-plotly-plot .gtitle { font-size: 28px !important; }
  body.pg-slides #pg-main .js-plotly-plot .xtitle, body.pg-slides #pg-main .js-plotly-plot .ytitle {
    font-size: 20px !important; }
  body.pg-slides #pg-main .js-plotly-plot .xtick text, body.pg-slides #pg-main .js-plotly-plot .ytick text {
    font-size: 17px !important; }
}
"""


def _top(page: Shared) -> None:
    """What a visitor needs first, on a phone too: model, strategy, prompt, Generate."""
    names, default = [s.name for s in strategies_in_order()], default_strategy("sampling")
    with gr.Row(equal_height=True, elem_id="pg-pickers"):
        page.model = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", allow_custom_value=True,
                                 elem_id="pg-model", min_width=220,
                                 info="Offline models, or a Hugging Face hub id.")
        page.dtype = gr.Dropdown(list(DTYPES), value=DEFAULT_DTYPE, label="Weights", elem_id="pg-dtype", min_width=160,
                                 info=WEIGHTS_INFO)
        page.strategy = gr.Dropdown(names, value=default, label="Strategy", elem_id="pg-strategy", min_width=220,
                                    info="Its parameters are below.")
    page.prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=2, elem_id="pg-prompt")
    page.prompt_note = gr.Markdown(toy_note(DEFAULT_MODEL), elem_classes=["pg-summary"], elem_id="pg-prompt-note")
    page.prompt_fit = gr.Button("", visible=False, size="sm", variant="secondary", elem_id="pg-prompt-fit")
    with gr.Row(elem_id="pg-actions"):
        # enabled once the page's load event has restored a link's settings (_wire_share)
        page.generate = gr.Button("Generate", variant="primary", elem_id="pg-generate", scale=2, interactive=False)
        page.stop = gr.Button("Stop", variant="stop", elem_id="pg-stop", scale=1)
        page.link = gr.Button("Copy share link", elem_id="pg-copy-link", scale=1)
    with gr.Accordion("What the model sees", open=False, elem_id="pg-sees") as page.sees_box:
        page.sees = gr.Textbox(LOADS_WITH_MODEL, label="The prompt as the model reads it", lines=3, max_lines=14,
                               interactive=False, elem_id="pg-sees-text", buttons=["copy"],
                               info="The chat template's text (with any default system prompt it adds) or the "
                                    "plain prompt.")
    gr.Markdown(QUEUE_NOTE, elem_classes=["pg-summary"], elem_id="pg-queue-note")
    page.link_box = gr.Textbox(label="Share link (copied)", visible=False, buttons=["copy"], elem_id="pg-link",
                               interactive=False)
    with gr.Row(elem_id="pg-examples", equal_height=True):
        gr.HTML('<span class="pg-examples-title">One click, one phenomenon:</span>')
        page.example_buttons = [gr.Button(ex.label, size="sm", elem_classes=["pg-example"]) for ex in examples()]
    page.example_note = gr.Markdown("", elem_classes=["pg-summary"], elem_id="pg-example-note")
    page.example_key = gr.State("")


def _sidebar(page: Shared, engines: EnginesPanel) -> None:
    """Seed and budget first, then the selected strategy's parameters (collapsible: closed on a phone; the
    rest of the chain folded in an advanced group; a value preset first), the grammar, the chat template and
    an engine's settings to import."""
    default = default_strategy("sampling")
    chat_model = is_chat_model(DEFAULT_MODEL)
    page.seed = gr.Number(value=0, label="Seed", precision=0, elem_id="pg-seed",
                          info=f"An integer in [0, {MAX_SEED}]: the same seed gives the same run.")
    page.random_seed = gr.Checkbox(False, label="Random seed: a new one each run, written into the box",
                                   elem_id="pg-random-seed")
    # a box, like Seed: a value out of range is refused with the range, never shortened silently
    page.max_new = gr.Number(value=share.DEFAULT_MAX_NEW_TOKENS, label="Max new tokens", precision=0,
                             elem_id="pg-max-new", info=f"An integer in [1, {MAX_NEW_TOKENS}].")
    page.summary = gr.Markdown(strategy_summary(default), elem_classes=["pg-summary"])
    with gr.Accordion("Strategy parameters", open=True, elem_id="pg-params") as page.params_box:
        engines.layout()
        page.panel = build_panel("p", default)
    with gr.Accordion("Grammar (structured output)", open=False, elem_id="pg-grammar") as page.grammar_box:
        page.grammar_kind = gr.Dropdown(list(GRAMMAR_CHOICES), value=NO_GRAMMAR, label="Grammar kind",
                                        elem_id="pg-grammar-kind",
                                        info="Free text, or a JSON schema, a regular expression, a list of choices, a Lark "
                                             "grammar.")
        page.grammar_text = gr.Textbox("", label="Grammar", lines=3, max_lines=12, elem_id="pg-grammar-text",
                                       placeholder="", info="The schema, expression, choices or Lark grammar.")
        gr.Markdown(GRAMMAR_NOTE, elem_classes=["pg-summary"])
        with gr.Accordion("How the grammar works, each kind with an example", open=False,
                          elem_id="pg-grammar-about"):
            gr.Markdown(GRAMMAR_HELP, elem_classes=["pg-summary", "pg-grammar-help"])
    page.chat = gr.Checkbox(value=True, label="Chat template", visible=chat_model, elem_id="pg-chat",
                            info="Wrap the prompt in the model's chat template (off: raw continuation).")
    page.system = gr.Textbox("", label="System prompt", lines=2, visible=chat_model, elem_id="pg-system")
    engines.import_layout()


def _layout() -> tuple[Shared, Explore, Compare, whatif.WhatIf, EnginesPanel]:
    """The page's components: the shared ones, then each tab's; ``carried`` hands the tabs' controls a link
    holds to the shared object."""
    page, explore, compare, engines = Shared(), Explore(), Compare(), EnginesPanel()
    page.trace, page.mode = gr.State(None), gr.State("generate")  # mode: what a share link re-runs
    page.traces = {"a": gr.State(None), "b": gr.State(None)}
    gr.HTML(HEADER)
    with gr.Column(elem_id="pg-top"):
        _top(page)
    with gr.Row(equal_height=False, elem_id="pg-layout"):
        with gr.Column(scale=1, min_width=300, elem_id="pg-sidebar"):
            _sidebar(page, engines)
        with gr.Column(scale=3, elem_id="pg-main"):
            with gr.Row(equal_height=True, elem_id="pg-slides-bar"):
                page.slides = gr.Checkbox(False, label="Slides view: one chart large",
                                          scale=2, elem_id="pg-slides", min_width=200, container=False)
                # each choice says what it is on screen ("chart: distribution"; alone, "distribution" beside the
                # checkbox said nothing), its label to a screen reader (a menu without a container shows none)
                page.slides_chart = gr.Dropdown([(f"chart: {name}", name) for name in SLIDE_CHARTS],
                                                value="distribution", label="Chart shown large", show_label=False,
                                                elem_id="pg-slides-chart", scale=1, min_width=160, container=False)
            with gr.Tabs(elem_id="pg-tabs") as page.tabs:
                with gr.Tab("Explore", id="explore") as explore.tab:
                    explore.layout()
                    with explore.export:
                        engines.copy_as_layout()
                with gr.Tab("Compare", id="compare") as compare.tab:
                    compare.layout()
                with gr.Tab("What if", id="whatif"):
                    w = whatif.layout()
    with gr.Column(visible=False):
        api.layout(page)
        page.run_flag = gr.Textbox("", visible=False)
        page.theme = gr.Textbox("light", visible=False)  # "dark:390": the page's theme and width, read on load
    b = explore.branches
    page.carried = Carried(compare.strategy, compare.panel, compare.summary, b.forced, b.pending, b.state,
                           w.pair_model, w.pair_dtypes, w.pair_text, w.pair_box, w.pair_record, w.sweep, w.score_text,
                           w.score_trace)
    return page, explore, compare, w, engines


def model_sees(store: ModelStore, model: str, prompt: str, system: str, chat: Any) -> Any:
    """The "what the model sees" box for these settings: the text the model reads (the chat template applied
    with what it adds by itself, or the plain prompt) and its token count, read with the loaded model's
    tokenizer; a model that is not loaded is not loaded for this (the box says it loads with the model)."""
    if model not in store.loaded():
        return gr.update(value=LOADS_WITH_MODEL, label="The prompt as the model reads it")
    try:
        lm = store.get(model)
        ids = lm.encode(prompt, system or "", chat_flag(model, chat))
        text = lm.tokenizer.decode(ids, skip_special_tokens=False)
    except InvalidRequest as err:
        return gr.update(value=str(err), label="The prompt as the model reads it")
    return gr.update(value=text, label=f"The prompt as the model reads it: {counted(len(ids), 'token')}")


def _wire_controls(page: Shared, store: ModelStore, trace_file: gr.File) -> None:
    """Strategy choice shows only its controls; the chat controls, the note under the prompt, the draft and
    amateur menus and the "what the model sees" box follow the model; the slides view."""
    carried = page.carried
    for dropdown, panel, summary in ((page.strategy, page.panel, page.summary),
                                     (carried.compare_strategy, carried.compare_panel, carried.compare_summary)):
        # a person's choice (input): a link, an example or an import sets the strategy with its values itself
        # (Shared.apply_config, engines_panel), which a change event here would reset to the defaults
        inputs, chosen = panel.select_event(dropdown)
        dropdown.input(lambda values, chosen=chosen, dropdown=dropdown, summary=summary:
                       {**chosen(values), summary: strategy_summary(values[dropdown])},
                       inputs, [*panel.outputs, summary], **QUIET)
        panel.wire(dropdown)
    page.chat.change(lambda m, c: gr.update(visible=is_chat_model(m) and c), [page.model, page.chat], page.system,
                     **QUIET)
    page.grammar_kind.change(lambda k: gr.update(placeholder=grammar_placeholder(k)), page.grammar_kind,
                             page.grammar_text, **QUIET)
    _wire_prompt(page, store)
    menus = [comp for panel in (page.panel, carried.compare_panel) for _, comp in panel.paired]
    controls = [c for panel in (page.panel, carried.compare_panel) for c, _ in panel.paired]

    def on_model_change(model: str, chat: Any, *menu_values: Any) -> list[Any]:
        chat_model = is_chat_model(model)
        return [gr.update(visible=chat_model), gr.update(visible=chat_model and chat),
                toy_note(model, store.get(model).vocabulary() if model in store.loaded() else None),
                *(pair_update(c, model, v) for c, v in zip(controls, menu_values))]
    page.model.change(on_model_change, [page.model, page.chat, *menus],
                      [page.chat, page.system, page.prompt_note, *menus], **QUIET)
    sees_inputs = [page.model, page.prompt, page.system, page.chat]
    # ... and once a run has loaded the model (its trace file is written when the run ends)
    gr.on([page.model.change, page.prompt.change, page.system.change, page.chat.change, page.sees_box.expand,
           trace_file.change],
          lambda *v: model_sees(store, *v), sees_inputs, page.sees, trigger_mode="always_last", **QUIET)
    page.slides.change(None, [page.slides, page.slides_chart], None, js=SLIDES_JS, api_visibility="private")
    page.slides_chart.change(None, [page.slides, page.slides_chart], None, js=SLIDES_JS, api_visibility="private")
    # a branch's forced tokens belong to its prompt, model and strategy: a person changing one starts afresh
    # (and a restored link's branch, still waiting for its parent run, is dropped)
    gr.on([control.input for control in (page.model, page.prompt, page.strategy)], lambda: ["", None], None,
          [carried.forced, carried.pending], **QUIET)
    # what a run filled in (auto's tree, from this model's measured costs) is chosen afresh for other weights
    filled = [*page.panel.filled, *carried.compare_panel.filled]
    gr.on([page.model.input, page.dtype.input], lambda: keyed({comp: "" for comp in filled}), None, filled, **QUIET)


def _wire_prompt(page: Shared, store: ModelStore) -> None:
    """A person picking another model gets a prompt that model can take where the prompt is still a default or
    an example's; a typed prompt the new model cannot read is kept, and a button offers one it can: never
    replaced unasked."""
    def vocabulary_of(model: str) -> list[str] | None:
        return store.get(model).vocabulary() if model in store.loaded() else None

    def fit_button(model: str, prompt: str) -> Any:
        offer = prompt_offer(model, prompt, vocabulary_of(model))
        return gr.update(visible=bool(offer), value=f"Use {model}'s prompt “{offer}” instead" if offer else "")

    def on_model(model: str, prompt: str) -> tuple[str, str]:
        return prompt_on_model(model, prompt, vocabulary_of(model))
    page.model.input(on_model, [page.model, page.prompt], [page.prompt, page.prompt_note], **QUIET)
    # one listener for both triggers: its runs go in order, so the last reads the model and prompt shown
    gr.on([page.model.change, page.prompt.change], fit_button, [page.model, page.prompt], page.prompt_fit,
          trigger_mode="always_last", concurrency_limit=1, **QUIET)
    page.prompt_fit.click(lambda model, prompt: [prompt_offer(model, prompt, vocabulary_of(model)) or prompt,
                                                 gr.update(visible=False)],
                          [page.model, page.prompt], [page.prompt, page.prompt_fit], **QUIET)


def lockstep_link(record: dict[str, Any] | None, model: str) -> dict[str, str] | None:
    """The lockstep last read on the What-if tab as a link's ``pair_*`` fields (share.Config): model B
    ("" when it is the page's model), both sides' weights and the text they read; None when none was read."""
    if not record or not record.get("steps"):
        return None
    b = record["b"]["model"]
    return {"pair_model": "" if b == model else b, "pair_a": record["a"]["dtype"], "pair_b": record["b"]["dtype"],
            "pair_text": record.get("text", "")}


def _wire_share(page: Shared, demo: gr.Blocks, explore: Explore, compare: Compare, runs: list[gr.Button]) -> None:
    """Copy link, and what a run starting does to it; restore on load (and re-run where the link says so),
    the run buttons enabled after it (``runs``); the examples."""
    carried = page.carried

    def on_share(values: dict[Any, Any]) -> Any:
        settings = page.split_config(values)
        # a branch shown: its parent comes with it
        branch = branches.share_steps(values[carried.tree], settings["forced"])
        pair = lockstep_link(values[carried.pair_record], settings["model"])
        sweep = sweep_link(values[carried.sweep.record], settings["strategy"])
        scored = values[carried.score_text] if values[carried.score_trace] else ""  # Score's text, once scored
        try:
            return gr.update(value=share_query(**settings, run=values[page.mode], branch=branch, pair=pair,
                                               sweep=sweep, score_text=scored),
                             visible=True)
        except InvalidRequest as err:  # a value over its limit: no link rather than a cut one
            raise refusal(err) from None

    # what a share link re-runs: the tab shown
    def on_tab(evt: gr.EventData) -> str:
        return "compare" if evt.target is compare.tab else "generate"
    gr.on([explore.tab.select, compare.tab.select], on_tab, None, page.mode, **QUIET)
    page.link.click(on_share, page.config_inputs | {carried.tree, page.mode, carried.pair_record, carried.sweep.record,
                                                    carried.score_text, carried.score_trace},
                    page.link_box, **QUIET).then(
        None, page.link_box, page.link_box, js=COPY_JS, api_visibility="private")
    starts = {"generate": [page.generate.click, page.prompt.submit], "compare": [compare.run.click],
              "branch": [explore.branches.run.click, explore.branches.hook.click]}
    gr.on([t for triggers in starts.values() for t in triggers], hide_link, None, page.link_box, queue=False,
          api_visibility="private")
    for mode, triggers in starts.items():
        gr.on(triggers, _example_note_on(page, mode), page.config_inputs | {page.example_key},
              [page.example_note, page.example_key], queue=False, api_visibility="private")
    demo.load(None, None, page.theme, js=PAGE_JS, api_visibility="private")

    def on_load(request: gr.Request) -> list[Any]:
        query = {k: v for k, v in (request.query_params if request is not None else {}).items()
                 if not k.startswith("__")}  # __theme and the like belong to gradio
        if not query:
            return keyed({})
        cfg, warnings = restore(query)
        for w in warnings[:3]:
            gr.Warning(w)
        return keyed(page.apply_config(cfg))

    # The buttons a link's run= clicks (Generate, Compare's and lockstep's runs) are enabled only after
    # the restore: a click before it would read the page's defaults (the loading status Gradio keeps does
    # not hold a click back until another event's outputs land)
    demo.load(on_load, None, page.restore_outputs, **QUIET).then(
        lambda: [gr.Button(interactive=True)] * len(runs), None, runs, queue=False, **QUIET).then(
        None, page.run_flag, None, js=RUN_JS, api_visibility="private")
    _wire_examples(page)


def hide_link() -> Any:
    """A new run starts: the link copied for the last one is no longer this page's, so it goes."""
    return gr.update(value="", visible=False)


def _example_note_on(page: Shared, mode: str) -> Any:
    """A run starts in ``mode``: an example's note stays only while the run is the example's again
    (examples.note_after); a branch's run never is."""
    def on_run(values: dict[Any, Any]) -> Any:
        try:
            run = page_config(**page.split_config(values), run=mode) if mode != "branch" else None
        except (InvalidRequest, TypeError, ValueError):  # settings the run itself refuses
            run = None
        if note_after(values[page.example_key], run, mode):
            return keyed({})
        return keyed({page.example_note: "", page.example_key: ""})
    return on_run


def _wire_examples(page: Shared) -> None:
    """One event for every example's button: the example restored into the controls with its note, then run
    where it says so."""
    shown = examples()

    def on_example(evt: gr.EventData) -> Any:
        ex = shown[[id(b) for b in page.example_buttons].index(id(evt.target))]
        return {**page.apply_config(ex.config, weights=False), page.example_note: f"**{ex.label}**: {ex.note}",
                page.example_key: example_run_key(ex), page.run_flag: ex.run_flag,
                **({page.tabs: gr.Tabs(selected="whatif")} if ex.whatif and ex.config.run != "compare" else {})}
    gr.on([b.click for b in page.example_buttons], on_example, None,
          [*page.restore_outputs, page.example_note, page.example_key], **QUIET).then(
        None, page.run_flag, None, js=RUN_JS, api_visibility="private")


def build_demo(store: ModelStore, decoder: Decoder | None = None) -> gr.Blocks:
    """The whole page, wired to ``store``. Call ``demo.launch(**launch_kwargs())`` to serve it."""
    decode = decoder or default_decoder(store)
    with gr.Blocks(title="Decoding Playground", delete_cache=(3600, 3600)) as demo:
        page, explore, compare, w, engines = _layout()
        _wire_controls(page, store, explore.trace_file)
        compare.wire(page, store, decode)
        explore.wire(page, store, decode, compare)
        _wire_share(page, demo, explore, compare, [page.generate, compare.run, w.pair_run, w.sweep.run])
        api.wire(page, decode, store)
        whatif.wire(page, w, store)
        engines.wire(page, explore.trace_file)
    no_progress_targets(demo)
    demo.queue(max_size=QUEUE_MAX)
    return demo


def serve(store: ModelStore, host: str = "127.0.0.1", port: int | None = None,
          decoder: Decoder | None = None) -> tuple[gr.Blocks, str]:
    """Build and launch the page without blocking (tests, screenshots); returns (demo, its URL)."""
    demo = build_demo(store, decoder)
    _, url, _ = demo.launch(server_name=host, server_port=port, prevent_thread_lock=True, quiet=True,
                            **launch_kwargs())
    return demo, url


def launch_kwargs() -> dict[str, Any]:
    """theme / css / head for ``demo.launch`` (Gradio 6 takes them there, not in Blocks)."""
    theme = gr.themes.Soft(primary_hue="blue", secondary_hue="amber", neutral_hue="slate",
                           font=[gr.themes.Font(f) for f in ("Inter", "ui-sans-serif", "system-ui", "sans-serif")],
                           font_mono=[gr.themes.Font(f) for f in ("JetBrains Mono", "ui-monospace", "monospace")])
    head = f"<script>{(ASSETS / 'playground.js').read_text(encoding='utf-8')}</script><style>{SLIDES_CSS}{SIDES_CSS}</style>"
    return dict(theme=theme, css=(ASSETS / "style.css").read_text(encoding="utf-8"), head=head,
                **mcp_kwargs())


def mcp_kwargs() -> dict[str, Any]:
    """``mcp_server=True`` where Gradio can serve MCP (its ``mcp`` extra is installed), so an agent
    can call /generate and /strategies as tools; nothing otherwise."""
    return {"mcp_server": True} if importlib.util.find_spec("mcp") is not None else {}
