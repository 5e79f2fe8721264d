"""The "What if" tab: Sample many, the Sweep and its answer rules (playground.ui.sweep_panel), Score a
text, two models in lockstep (branching lives on the Explore tab: playground.ui.branches).

Handlers are plain functions (primitives and dicts in, figures and HTML out), tested without a
browser; ``layout`` builds the tab's components inside the page's Tabs and ``wire`` connects them
to the sidebar's controls (model, strategy and its parameters, prompt, seed, chat).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr
import plotly.graph_objects as go

from playground.charts.lockstep import lockstep_figure, step_figure
from playground.charts.steps import StepCharts, clamp_step, empty_figure, step_figures
from playground.charts.text import token_html
from playground.charts.watermark import detection_html
from playground.charts.whatif import sample_figure, sample_table_html, score_html
from playground.engine import Request
from playground.errors import InvalidRequest
from playground.models import OFFLINE
from playground.models.dtypes import DEFAULT_DTYPE, DTYPES
from playground.ui import events
from playground.ui.events import (
    MODEL_EVENT,
    QUIET,
    chat_flag,
    event_data,
    handler,
    keyed,
    plot_component,
    plot_value,
    text_js,
)
from playground.ui.export import write_sample_many_json
from playground.ui.sweep_panel import SweepPanel
from playground.whatif.lockstep import lockstep
from playground.whatif.sample_many import MAX_SAMPLES, MAX_TOKENS, sample_many
from playground.whatif.score import score, summary
from playground.whatif.watermark import detect_synthid_text, detect_text

if TYPE_CHECKING:
    from playground.models import ModelStore, Progress
    from playground.ui.components import Shared

# a click on a step of the lockstep chart, forwarded by assets/playground.js, as the hook's Gradio event
PAIR_JS = "window.addEventListener('pg-pair-select', (e) => trigger('click', {step: e.detail}));"

# --- handlers --------------------------------------------------------------------------------------


# greedy, sampling and gumbel draw the samples as rows of one batch (the prompt read once; samples that wrote
# the same text share a row), each with its own seed: the same draws but where the batch's rounding flips a
# near tie; another strategy runs once per seed whatever the box says
BATCHED_INFO = "greedy, sampling, gumbel: rows of one batch, a seed each. Off (or others): one run per seed."


def sample_many_view(store: ModelStore, model: str, strategy: str, prompt: str, params: dict[str, Any],
                     seed: Any, n: Any, tokens: Any, system: str = "", chat: bool | None = None,
                     batched: bool = True, progress: Progress | None = None, grammar: Any = None,
                     dtype: str = DEFAULT_DTYPE) -> tuple[go.Figure, str, dict[str, Any]]:
    """(frequency vs exact bars, outcome table HTML, the sample-many result). With a ``grammar``
    ({"kind", "text"}) the bars add P(y | y valid) and the table says what the gap means. ``dtype``: the
    page's Weights, as Generate runs them (the table names the weights that ran)."""
    req = Request(model=model, strategy=strategy, prompt=prompt, params=dict(params or {}), seed=seed,
                  max_new_tokens=_int("tokens", tokens, 1, MAX_TOKENS), system=system or "", chat=chat,
                  grammar=grammar, dtype=dtype or DEFAULT_DTYPE)
    result = sample_many(store, req, n, batched, progress)
    return sample_figure(result), sample_table_html(result), result


def score_view(store: ModelStore, model: str, text: str, prompt: str = "", system: str = "",
               chat: bool | None = None, progress: Progress | None = None, grammar: Any = None,
               dtype: str = DEFAULT_DTYPE) -> tuple[str, str, dict[str, Any], int, StepCharts]:
    """(coloured text, summary table, trace dict, the selected step, that step's three charts).
    The selected step is the most surprising token (with a grammar the text leaves: that token).
    ``dtype``: the page's Weights, as Generate runs them (the summary names the weights that ran)."""
    trace = score(store, model, text, prompt, system or "", chat, progress=progress, grammar=grammar,
                  dtype=dtype or DEFAULT_DTYPE)
    d = trace.to_dict()
    step = max(range(len(trace.steps)), key=lambda i: trace.steps[i].extra["surprisal"] or 0.0)
    leaves = (trace.extra["score"].get("grammar") or {}).get("leaves_at")
    step = step if leaves is None else leaves
    return token_html(d, step), score_html(summary(trace)), d, step, step_figures(d, step)


def select_score_step(trace: dict[str, Any] | None, step: Any) -> tuple[str, StepCharts] | None:
    """The score view with another token selected (a click on the text): its text and step charts."""
    k = clamp_step(trace, step)
    if trace is None or k is None:
        return None
    return token_html(trace, k), step_figures(trace, k)


def lockstep_view(store: ModelStore, model: str, model_b: str, dtype_a: str, dtype_b: str, text: str,
                  prompt: str = "", system: str = "", chat: bool | None = None, trace: dict[str, Any] | None = None,
                  progress: Progress | None = None) -> tuple[dict[str, Any], int]:
    """(the lockstep record, the step of largest KL(A||B)). An empty ``text`` takes the Explore run's
    (``trace``): its text after its prompt, read by its model as A."""
    if not str(text or "").strip():
        if not trace or not trace.get("text"):
            raise InvalidRequest("paste a text, or generate a run first: the two models read its text")
        text, prompt, model = trace["text"], trace.get("prompt", ""), trace["model"]
    record = lockstep(store, text, model, model_b or model, dtype_a, dtype_b, prompt, system, chat,
                      progress=progress)
    return record, record["summary"]["largest"][0]


def watermark_view(store: ModelStore, model: str, text: str, params: dict[str, Any], prompt: str = "",
                   system: str = "", chat: bool | None = None, progress: Progress | None = None) -> str:
    """The detection of ``text`` as HTML, with the watermark the sidebar's parameters name: SynthID when they
    carry keys, else the green list (its gamma, scheme and key; the defaults for a strategy without them)."""
    p = dict(params or {})
    if str(p.get("synthid_keys") or "").strip():
        result = detect_synthid_text(store, model, text, p["synthid_keys"], p.get("synthid_ngram_len", 5),
                                     p.get("synthid_context_history_size"), p.get("synthid_sampling_table_size"),
                                     p.get("synthid_sampling_table_seed"), progress=progress)
    else:
        result = detect_text(store, model, text, prompt, system, chat, p.get("watermark_gamma", 0.25),
                             p.get("watermark_scheme", "lefthash"), p.get("watermark_key"), progress=progress)
    return detection_html(result)


def grammar_value(kind: Any, text: Any) -> dict[str, str] | None:
    """The sidebar's grammar controls as a Request's grammar: None for "none" or an empty text."""
    kind = str(kind or "none").strip()
    return None if kind == "none" or not str(text or "").strip() else {"kind": kind, "text": str(text)}


def _int(name: str, value: Any, low: int, high: int) -> int:
    try:
        ok = float(value).is_integer() and low <= int(value) <= high
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidRequest(f"{name} must be an integer in [{low}, {high}], got {value}")
    return int(value)


# --- the tab ---------------------------------------------------------------------------------------


@dataclass
class WhatIf:
    n: gr.Slider
    tokens: gr.Slider
    batched: gr.Checkbox
    sample_run: gr.Button
    sample_plot: gr.Plot
    sample_table: gr.HTML
    sample_file: gr.File
    score_text: gr.Textbox
    score_run: gr.Button
    score_tokens: gr.HTML
    score_summary: gr.HTML
    score_plots: StepCharts  # of gr.Plot
    score_trace: gr.State
    detect_run: gr.Button
    detect_result: gr.HTML
    pair_model: gr.Dropdown
    pair_dtypes: list[gr.Dropdown]
    pair_text: gr.Textbox
    pair_run: gr.Button
    pair_plot: gr.Plot
    pair_step: gr.Slider
    pair_step_plot: gr.Plot
    pair_record: gr.State
    pair_hook: gr.HTML
    pair_box: gr.Accordion
    sweep: SweepPanel


def layout() -> WhatIf:
    """The tab's components; call inside ``gr.Tab("What if")``."""
    with gr.Accordion("Sample many: is the 30% really 30%?", open=True):
        gr.Markdown("Draw N samples with the sidebar's settings (seeds s, s+1, ...) and set each outcome's "
                    "frequency beside its exact probability.", elem_classes=["pg-summary"])
        with gr.Row():
            n = gr.Slider(10, MAX_SAMPLES, value=500, step=10, label="Samples (N)", elem_id="pg-whatif-n")
            tokens = gr.Slider(1, MAX_TOKENS, value=4, step=1, label="Tokens per outcome", elem_id="pg-whatif-k")
            batched = gr.Checkbox(True, label="Batched rows", elem_id="pg-whatif-batched", info=BATCHED_INFO)
        sample_run = gr.Button("Sample many", variant="primary", elem_id="pg-whatif-sample")
        sample_plot = plot_component(empty_figure("Sample many to see the bars"), show_label=False,
                                     elem_id="pg-whatif-bars")
        sample_table = gr.HTML(elem_id="pg-whatif-table")
        sample_file = gr.File(label="Sample-many JSON (every outcome with its count and probability)",
                              elem_id="pg-whatif-file")
    sweep = SweepPanel()
    sweep.layout()
    with gr.Accordion("Score a text: how surprised is the model?", open=True):
        score_text = gr.Textbox("", label="Text to score (with a chat model: the answer to the prompt)", lines=3,
                                elem_id="pg-whatif-text")
        score_run = gr.Button("Score", variant="primary", elem_id="pg-whatif-score")
        score_tokens = gr.HTML(token_html({}), js_on_load=text_js("score"), elem_id="pg-whatif-tokens")
        score_summary = gr.HTML(elem_id="pg-whatif-summary")
        score_plots = StepCharts(*(plot_component(empty_figure("Score a text to see its steps"), show_label=False,
                                                  elem_id=f"pg-whatif-score-{i}") for i in range(3)))
        detect_run = gr.Button("Detect a watermark (the sidebar's watermark settings)", size="sm",
                               elem_id="pg-whatif-detect")
        detect_result = gr.HTML(elem_id="pg-whatif-detected")
    with gr.Accordion("Two models in lockstep: where do they part?", open=False, elem_id="pg-pair") as pair_box:
        gr.Markdown("The sidebar's model (A) and model B read the same text, one pass each: per step the KL "
                    "divergence both ways, the total variation and where their argmax differs. B may be A in other "
                    "weights (float32 against int4 shows what 4-bit weights do). An empty text box takes the "
                    "Explore run's text.", elem_classes=["pg-summary"])
        with gr.Row():
            pair_model = gr.Dropdown(list(OFFLINE), value=None, allow_custom_value=True,
                                     label="Model B (empty: the sidebar's)", elem_id="pg-pair-model")
            pair_dtypes = [gr.Dropdown(list(DTYPES), value=value, label=f"Weights of {side}",
                                       elem_id=f"pg-pair-dtype-{side.lower()}")
                           for side, value in (("A", "float32"), ("B", "int4"))]
        pair_text = gr.Textbox("", label="Text both read (empty: the Explore run's)", lines=2, elem_id="pg-pair-text")
        # enabled with Generate once the page's load event has restored a link's settings (page._wire_share)
        pair_run = gr.Button("Read in lockstep", variant="primary", elem_id="pg-pair-run", interactive=False)
        pair_plot = plot_component(empty_figure("Read a text in lockstep to see where the models part"),
                                   show_label=False, elem_id="pg-pair-plot")
        pair_step = gr.Slider(0, 1, value=0, step=1, label="Step: both distributions side by side", visible=False,
                              elem_id="pg-pair-step")
        pair_step_plot = plot_component(empty_figure(""), show_label=False, visible=False,
                                        elem_id="pg-pair-step-plot")
        # a click on a step of the lockstep chart (assets/playground.js) opens that step's distributions
        pair_hook = gr.HTML("", js_on_load=PAIR_JS, elem_id="pg-pair-hook")
    return WhatIf(n, tokens, batched, sample_run, sample_plot, sample_table, sample_file, score_text, score_run, score_tokens,
                  score_summary, score_plots, gr.State(None), detect_run, detect_result, pair_model, pair_dtypes, pair_text, pair_run, pair_plot,
                  pair_step, pair_step_plot, gr.State(None), pair_hook, pair_box, sweep)


def wire(page: Shared, w: WhatIf, store: ModelStore) -> None:
    """Connect the tab to the shared controls (the sidebar's settings, the Explore run's trace)."""
    _wire_samples(page, w, store)
    _wire_score(page, w, store)
    _wire_pair(page, w, store)
    w.sweep.wire(page, store)


def _wire_samples(page: Shared, w: WhatIf, store: ModelStore) -> None:
    """Sample many (the sidebar's run, N times) and the watermark detector (on Score's text)."""
    config = page.config_inputs

    def on_sample(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
        cfg = page.split_config(values)
        n, tokens, batched, theme = (values[c] for c in (w.n, w.tokens, w.batched, page.theme))
        fig, table, result = sample_many_view(store, cfg["model"], cfg["strategy"], cfg["prompt"], cfg["params"],
                                         cfg["seed"], n, tokens, cfg["system"], chat_flag(cfg["model"], cfg["chat"]),
                                         bool(batched), events.progress(progress),
                                         grammar_value(cfg.get("grammar_kind"), cfg.get("grammar_text")), cfg["dtype"])
        yield keyed({w.sample_plot: plot_value(fig, theme), w.sample_table: table,
                     w.sample_file: write_sample_many_json(result)})

    w.sample_run.click(handler(on_sample, 1, True), config | {w.n, w.tokens, w.batched, page.theme},
                       [w.sample_plot, w.sample_table, w.sample_file], api_name="sample_many", api_visibility="undocumented",
                       show_progress="full", **MODEL_EVENT)

    def on_detect(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
        cfg = page.split_config(values)
        text = values[w.score_text]
        yield keyed({w.detect_result: watermark_view(store, cfg["model"], text, cfg["params"], cfg["prompt"],
                                                     cfg["system"], chat_flag(cfg["model"], cfg["chat"]),
                                                     events.progress(progress))})

    w.detect_run.click(handler(on_detect, 1, True), config | {w.score_text}, [w.detect_result],
                       api_name="detect", api_visibility="undocumented", show_progress="full", **MODEL_EVENT)


def _wire_score(page: Shared, w: WhatIf, store: ModelStore) -> None:
    """Score a text under the sidebar's model (and grammar); a click on a token shows its step."""
    # the sidebar's grammar, where the page has its controls
    grammar_inputs = [c for c in (getattr(page, "grammar_kind", None), getattr(page, "grammar_text", None))
                      if c is not None]
    grammar_inputs = grammar_inputs if len(grammar_inputs) == 2 else []

    def on_score(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
        model = values[page.model]
        grammar = grammar_value(*(values[c] for c in grammar_inputs)) if grammar_inputs else None
        tokens, table, trace, _, figs = score_view(store, model, values[w.score_text], values[page.prompt],
                                                   values[page.system], chat_flag(model, values[page.chat]),
                                                   events.progress(progress), grammar, values[page.dtype])
        theme = values[page.theme]
        yield keyed({w.score_tokens: tokens, w.score_summary: table, w.score_trace: trace,
                     **w.score_plots.by_name(figs.apply(lambda f: plot_value(f, theme)))})

    def on_score_click(trace: dict[str, Any] | None, theme: str, evt: gr.EventData) -> Any:
        picked = select_score_step(trace, event_data(evt).get("step", 0))
        if not picked:
            return keyed({})
        html, figures = picked
        return keyed({w.score_tokens: html, **w.score_plots.by_name(figures.apply(lambda f: plot_value(f, theme)))})

    w.score_run.click(handler(on_score, 1, True),
                      {page.model, page.prompt, page.system, page.chat, page.dtype, w.score_text, page.theme,
                       *grammar_inputs},
                      [w.score_tokens, w.score_summary, w.score_trace, *w.score_plots], api_name="score",
                      api_visibility="undocumented", show_progress="full", **MODEL_EVENT)
    w.score_tokens.click(on_score_click, [w.score_trace, page.theme], [w.score_tokens, *w.score_plots], **QUIET)


def _wire_pair(page: Shared, w: WhatIf, store: ModelStore) -> None:
    """Lockstep: two models (or two weights of one) read the same text; a step slider and a click on the chart
    open a step's distributions."""
    def on_pair(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
        model, (dtype_a, dtype_b), theme = values[page.model], (values[c] for c in w.pair_dtypes), values[page.theme]
        record, k = lockstep_view(store, model, str(values[w.pair_model] or ""), dtype_a, dtype_b,
                                  values[w.pair_text], values[page.prompt], values[page.system],
                                  chat_flag(model, values[page.chat]), values[page.trace], events.progress(progress))
        n = len(record["steps"])
        yield keyed({w.pair_plot: plot_value(lockstep_figure(record, k), theme), w.pair_record: record,
                     w.pair_step: gr.update(maximum=max(1, n - 1), value=k, visible=True),
                     w.pair_step_plot: gr.update(value=plot_value(step_figure(record, k), theme), visible=True)})

    def on_pair_step(record: dict[str, Any] | None, k: Any, theme: str) -> Any:
        if not record or not record.get("steps"):
            return keyed({})
        k = min(max(int(k or 0), 0), len(record["steps"]) - 1)
        return keyed({w.pair_plot: plot_value(lockstep_figure(record, k), theme),
                      w.pair_step_plot: plot_value(step_figure(record, k), theme)})

    def on_pair_click(record: dict[str, Any] | None, theme: str, evt: gr.EventData) -> Any:
        step = event_data(evt).get("step")
        if not record or not record.get("steps") or not isinstance(step, int):
            return keyed({})
        k = min(max(step, 0), len(record["steps"]) - 1)
        return keyed({w.pair_step: gr.update(value=k), w.pair_plot: plot_value(lockstep_figure(record, k), theme),
                      w.pair_step_plot: plot_value(step_figure(record, k), theme)})

    w.pair_hook.click(on_pair_click, [w.pair_record, page.theme], [w.pair_step, w.pair_plot, w.pair_step_plot],
                      **QUIET)
    w.pair_run.click(handler(on_pair, 1, True),
                     {page.model, page.prompt, page.system, page.chat, page.trace, w.pair_model, *w.pair_dtypes,
                      w.pair_text, page.theme},
                     [w.pair_plot, w.pair_record, w.pair_step, w.pair_step_plot], api_name="lockstep",
                     api_visibility="undocumented", show_progress="full", **MODEL_EVENT)
    w.pair_step.input(on_pair_step, [w.pair_record, w.pair_step, page.theme], [w.pair_plot, w.pair_step_plot],
                      trigger_mode="always_last", **QUIET)
