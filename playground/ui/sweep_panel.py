"""The What-if tab's Sweep panel: one parameter over a grid, N samples at each value, the measures drawn as
the sweep goes; and the answer rules on one set of those samples (a sweep point's, or a fresh draw).

Handlers are plain functions (primitives and dicts in, figures and HTML out), tested without a browser;
``SweepPanel.layout`` builds the panel's components inside the tab and ``wire`` connects them to the
page's shared controls (model, weights, strategy and its parameters, prompt, seed, chat, grammar). A sweep
reads the page's Stop (and its own): it ends after the value in flight and keeps the values done.
"""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr
import plotly.graph_objects as go

from playground.charts.steps import empty_figure
from playground.charts.sweep import answers_figure, answers_html, point_html, sweep_figure
from playground.engine import Request
from playground.errors import InvalidRequest
from playground.models.dtypes import DEFAULT_DTYPE
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
)
from playground.ui.export import write_sweep_json
from playground.whatif.answers import DEFAULT_BRANCHES, RuleSettings, answers_of
from playground.whatif.extractors import EXTRACTOR_KINDS
from playground.whatif.grid import MAX_POINTS, grid, sweepable
from playground.whatif.rules import DEFAULT_ETA, DEFAULT_WINDOW
from playground.whatif.sample_many import MAX_TOKENS
from playground.whatif.sample_records import Draw, Stop, draw_records
from playground.whatif.step_record import drawn_from_dict
from playground.whatif.sweep import MAX_PAGE_N, MAX_SWEEP_SAMPLES, sweep_points
from strategies.params import describe, range_text
from strategies.registry import get_strategy

if TYPE_CHECKING:
    from playground.models import ModelStore, Progress
    from playground.ui.components import Shared
    from playground.ui.share import Config

SCALES = ("linear", "log")
# a click on a point of the sweep chart, forwarded by assets/playground.js (the point's index), opens its samples
POINT_JS = "window.addEventListener('pg-sweep-select', (e) => trigger('click', {step: e.detail}));"
NO_EXTRACTOR = "none"
ARGUMENT_KINDS = ("regex", "json", "choices")  # the extractors written KIND:ARGUMENT
PREFERRED = ("temperature", "num_beams", "gamma", "alpha")  # what a sweep most often varies, in order
FRESH = "fresh"  # the rules' samples: a fresh draw with the sidebar's settings (else a sweep point's index)
PROGRESS_SECONDS = 0.5  # the least time between two progress reports to the page
ACCURACY_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # N on the accuracy curve (and the pool's own size)
INTRO = ("Vary one of the strategy's parameters over a grid and draw N samples at every value (the same seeds "
         "s, s+1, ... each time, with the sidebar's model, weights, prompt and other settings): the loop rate, "
         "distinct-n, the chosen tokens' surprisal and entropy, the length, the share agreeing with the modal "
         "answer and, with a known answer, the accuracy. Stop (here or at the top) keeps the values done; a click "
         "on a point opens its samples.")
RULES_INTRO = ("Pick one answer out of N samples by each rule (majority vote, highest mean log-probability, "
               "DeepConf, CoT-decoding on its own branches, a verifier) and see where they part. The samples are "
               "a sweep point's (the very ones it measured) or a fresh draw with the sidebar's settings (N and the tokens "
               "per sample: the sweep's); the extractor and the known answer are the sweep's too.")


# --- handlers --------------------------------------------------------------------------------------


def number(name: str, value: Any) -> float:
    """A grid end as a float; an empty or non-finite box is refused, naming it."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x):
        raise InvalidRequest(f"the grid's {name} must be a finite number, got {'nothing' if value is None else value}")
    return x


def grid_values(start: Any, stop: Any, count: Any, scale: Any) -> list[float]:
    """The grid the boxes describe: ``count`` values from ``start`` to ``stop``, evenly spaced (``log``: in log)."""
    low, high = number("start", start), number("stop", stop)
    try:
        ok = float(count).is_integer() and 1 <= int(count) <= MAX_POINTS
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidRequest(f"the grid's values must be an integer in [1, {MAX_POINTS}], got "
                             f"{'nothing' if count is None else count}")
    if scale == "log" and (low <= 0 or high <= 0):
        bad = ("start", low) if low <= 0 else ("stop", high)
        raise InvalidRequest(f"a log grid's {bad[0]} must be > 0, got {bad[1]:g} (use linear for a grid through 0)")
    return grid("log" if scale == "log" else "lin", low, high, int(count))


def grid_spec(start: Any, stop: Any, count: Any, scale: Any) -> str:
    """The grid boxes as a link writes them, each end exactly (a float's shortest round-trip text):
    ``lin:LOW:HIGH:COUNT`` or ``log:LOW:HIGH:COUNT``."""
    ends = [repr(number(name, x)).removesuffix(".0") for name, x in (("start", start), ("stop", stop))]
    return f"{'log' if scale == 'log' else 'lin'}:{ends[0]}:{ends[1]}:{int(count)}"


def sweep_link(record: dict[str, Any] | None, strategy: str) -> dict[str, Any] | None:
    """The sweep last run as a link's ``sweep*`` fields (share.Config), None when none ran or it swept another
    strategy than the one the link names (its parameter may not be that strategy's)."""
    if not record or not record.get("grid") or record.get("strategy") != strategy:
        return None
    return {"sweep": record["param"], "sweep_grid": record["grid"], "sweep_n": record["n"],
            "sweep_tokens": record["tokens"], "sweep_extract": record.get("extract") or "",
            "sweep_known": "|".join(record.get("expected") or [])}


def extractor_spec(kind: Any, argument: Any) -> str | None:
    """The extractor controls as a spec (``last_number``, ``regex:PATTERN``, ...); None for none."""
    kind = str(kind or NO_EXTRACTOR)
    if kind == NO_EXTRACTOR:
        return None
    if kind in ARGUMENT_KINDS:
        if not str(argument or "").strip():
            raise InvalidRequest(f"the {kind} extractor needs its argument (a pattern, a field or choices A|B)")
        return f"{kind}:{argument}"
    return kind


def known_answers(text: Any) -> list[str]:
    """The known answer box: one answer, or several separated by ``|``; empty for none."""
    return [a.strip() for a in str(text or "").split("|") if a.strip()]


def suggested_grid(strategy: str, name: str) -> tuple[float, float, str]:
    """A grid over ``name``'s useful range (its slider's ends), and the parameter's range and help in words."""
    meta = next((m for m in describe(get_strategy(strategy).params) if m["name"] == name), None)
    if meta is None:
        return 0.0, 1.0, ""
    low = meta["low"] if meta["low"] is not None else 0.0
    high = meta["ui_max"] if meta["ui_max"] is not None else meta["high"]
    default = meta["default"] if isinstance(meta["default"], (int, float)) else 1.0
    high = high if high is not None and math.isfinite(high) else max(2 * default, low + 1)
    if meta["low_open"]:
        low = low + (high - low) / 20
    return float(low), float(high), f"**{name}** {range_text(meta)}: {meta['help']}"


def throttled(progress: Progress | None, seconds: float = PROGRESS_SECONDS) -> Progress | None:
    """``progress`` passed on at most every ``seconds`` (and at a value's start, the message that names it): a
    one-by-one draw reports every run, and each report makes the browser rewrite its loading states."""
    if progress is None:
        return None
    last = [-math.inf]

    def report(fraction: float, message: str) -> None:
        now = time.perf_counter()
        if now - last[0] >= seconds or " = " in message:
            last[0] = now
            progress(fraction, message)
    return report


def first_param(names: list[str], current: Any = None) -> str | None:
    """The parameter a strategy's sweep starts on: the one shown where the strategy has it, else the first of
    ``PREFERRED`` it has (beam: num_beams), else its first numeric one."""
    if current in names:
        return current
    return next((n for n in PREFERRED if n in names), names[0] if names else None)


def sweep_request(cfg: dict[str, Any], tokens: Any, grammar: Any = None) -> Request:
    """The sidebar's run as the sweep's request (its model, weights, strategy, parameters, prompt, seed)."""
    return Request(model=cfg["model"], strategy=cfg["strategy"], prompt=cfg["prompt"], params=dict(cfg["params"]),
                   seed=cfg["seed"], max_new_tokens=integer("tokens per sample", tokens, 1, MAX_TOKENS),
                   system=cfg["system"] or "", chat=chat_flag(cfg["model"], cfg["chat"]), grammar=grammar,
                   dtype=cfg["dtype"] or DEFAULT_DTYPE)


def integer(name: str, value: Any, low: int, high: int) -> int:
    try:
        ok = float(value).is_integer() and low <= int(value) <= high
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidRequest(f"{name} must be an integer in [{low}, {high}], got {value}")
    return int(value)


def sweep_view(store: ModelStore, req: Request, param: Any, values: list[float], n: Any, extract: str | None,
               expected: list[str], log_x: bool = False, progress: Progress | None = None,
               stop: Stop | None = None) -> Iterator[tuple[go.Figure, str, dict[str, Any]]]:
    """(the chart, the status line, the record) after every value of the sweep."""
    if not param:
        raise InvalidRequest(f"pick a parameter to sweep: {req.strategy} has "
                             f"{', '.join(sweepable(req.strategy)) or 'no numeric parameter'}")
    n = integer("samples per value", n, 1, MAX_SWEEP_SAMPLES)
    for record in sweep_points(store, req, str(param), values, n, extract, expected, True, progress, stop):
        yield sweep_figure(record, log_x), sweep_status(record), record


def sweep_status(record: dict[str, Any]) -> str:
    done, total = len(record["points"]), len(record["values"])
    state = ("stopped: the values done are kept" if record["stopped"] else "done" if record.get("done") else "running")
    how = "batched rows" if record["batched"] else "one run per seed"
    cut = record["points"][-1]["n"] if record["points"] and record["points"][-1]["n"] < record["n"] else None
    return (f"<div class='pg-status'><b>{state}</b> · {done} of {total} values · {record['n']} samples each "
            f"{'' if cut is None else f'(the last {cut}, cut by Stop) '}({how}) · {record['timing']['seconds']:.1f} s</div>")


def point_choices(record: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The rules' sample sources: a fresh draw, and each sweep point (its samples, as measured)."""
    out = [("fresh draw (the sidebar's settings)", FRESH)]
    for i, p in enumerate((record or {}).get("points", [])):
        out.append((f"{record['param']} = {p['value']:.4g} ({p['n']} samples)", str(i)))  # type: ignore[index]
    return out


def point_draw(record: dict[str, Any], index: int) -> tuple[Request, Draw]:
    """A sweep point's kept samples as a draw, and the request that drew them (for CoT-decoding's branches)."""
    point = record["points"][index]
    params = {**record["params"], record["param"]: point["value"]}
    draw = Draw([drawn_from_dict(s) for s in point["samples"]], point["batched"], record["strategy"], params,
                record["model"], record["tokens"])
    return Request(model=record["model"], strategy=record["strategy"], prompt=record["prompt"], params=params,
                   seed=record["seed"], max_new_tokens=record["tokens"], system=record.get("system", ""),
                   chat=record.get("chat"), dtype=record.get("dtype", DEFAULT_DTYPE)), draw


def rules_view(store: ModelStore, req: Request, source: Any, record: dict[str, Any] | None, n: Any, extract: str | None,
               verify: Any, expected: list[str], branches: Any, window: Any, eta: Any,
               progress: Progress | None = None) -> tuple[str, go.Figure | None, dict[str, Any]]:
    """(the rules' picks as HTML, the accuracy curve or None, the answers record) on a sweep point's samples
    (``source``: its index in ``record``) or a fresh draw of ``req``."""
    if extract is None:
        raise InvalidRequest("the answer rules need an answer extractor: pick one (last_number for a number)")
    share = float(eta) if isinstance(eta, (int, float)) else math.nan  # RuleSettings names the range
    settings = RuleSettings(integer("DeepConf's window", window, 1, 4096), share)
    k = integer("CoT-decoding's branches", branches, 0, 50)
    if source not in (None, "", FRESH) and record and record.get("points"):
        index = integer("the sweep point", source, 0, len(record["points"]) - 1)
        req, draw = point_draw(record, index)
        where = f"the sweep's {record['param']} = {record['points'][index]['value']:.4g}"
    else:
        draw = draw_records(store, req, integer("samples", n, 1, MAX_SWEEP_SAMPLES), progress, events.stop_requested)
        where = "a fresh draw with the sidebar's settings"
    result = answers_of(store, req, draw, extract, str(verify or "").strip() or None, expected, k, settings,
                        progress=progress, sizes=ACCURACY_SIZES)
    return answers_html(result, where), answers_figure(result), result


# --- the panel -------------------------------------------------------------------------------------


class SweepPanel:
    """The sweep and the answer rules; ``layout`` inside the What-if tab, then ``wire``. A share link carries
    the sweep last run (``sweep_link``) and sets its controls back (``restore``)."""

    @property
    def outputs(self) -> list[Any]:
        """Every component ``restore`` may set."""
        return [self.box, self.param, self.scale, self.start, self.end, self.count, self.n, self.tokens, self.extract,
                self.argument, self.known, self.about]

    def restore(self, cfg: Config) -> dict[Any, Any]:
        """The controls set to ``cfg``'s sweep (share.decode checked it), the panel open; without a sweep, the
        answer rules' settings it names (N, tokens, extractor, checker)."""
        extract, _, argument = cfg.sweep_extract.partition(":")
        if not cfg.sweep:
            return {self.box: gr.update(open=True), self.extract: extract or NO_EXTRACTOR, self.argument: argument,
                    self.known: cfg.sweep_known, **({self.n: cfg.sweep_n} if cfg.sweep_n else {}),
                    **({self.tokens: cfg.sweep_tokens} if cfg.sweep_tokens else {})}
        kind, low, high, count = cfg.sweep_grid.split(":")
        return {self.box: gr.update(open=True), self.param: gr.update(choices=sweepable(cfg.strategy), value=cfg.sweep),
                self.scale: "log" if kind == "log" else "linear", self.start: float(low), self.end: float(high),
                self.count: int(float(count)), self.n: cfg.sweep_n, self.tokens: cfg.sweep_tokens,
                self.extract: extract or NO_EXTRACTOR, self.argument: argument, self.known: cfg.sweep_known,
                self.about: suggested_grid(cfg.strategy, cfg.sweep)[2]}

    def layout(self) -> None:
        with gr.Accordion("Sweep: one knob over its whole range, and which answer N samples give", open=False,
                          elem_id="pg-sweep") as self.box:
            gr.Markdown(INTRO, elem_classes=["pg-summary"])
            self._grid_layout()
            self._answer_layout()
            with gr.Row():
                # enabled once the page's load event has restored a link (a link's sweep runs then)
                self.run = gr.Button("Run the sweep", variant="primary", elem_id="pg-sweep-run", scale=3,
                                     interactive=False)
                self.stop = gr.Button("Stop", variant="stop", elem_id="pg-sweep-stop", scale=1)
            self.status = gr.HTML("", elem_id="pg-sweep-status")
            self.plot = plot_component(empty_figure("Run a sweep to see the measures against the parameter"),
                                       show_label=False, elem_id="pg-sweep-plot")
            self.file = gr.File(label="Sweep JSON (every point's measures and samples)", elem_id="pg-sweep-file")
            self.record = gr.State(None)
            self.hook = gr.HTML("", js_on_load=POINT_JS, elem_id="pg-sweep-hook")
            self._rules_layout()

    def _grid_layout(self) -> None:
        first = "sampling"
        start, stop, about = suggested_grid(first, "temperature")
        with gr.Row():
            self.param = gr.Dropdown(sweepable(first), value="temperature", label="Parameter to sweep",
                                     elem_id="pg-sweep-param", min_width=200)
            self.scale = gr.Radio(list(SCALES), value="linear", label="Grid", elem_id="pg-sweep-scale", min_width=160)
        self.about = gr.Markdown(about, elem_classes=["pg-summary"], elem_id="pg-sweep-about")
        with gr.Row():
            # the three labels and infos are short, so the boxes stay in line on a phone (three to a row)
            self.start = gr.Number(start, label="Start", info="first value", elem_id="pg-sweep-start", min_width=80)
            self.end = gr.Number(stop, label="Stop at", info="last value", elem_id="pg-sweep-end", min_width=80)
            self.count = gr.Number(6, precision=0, label="Values", info=f"1 to {MAX_POINTS}", elem_id="pg-sweep-count",
                                   min_width=80)
        with gr.Row():
            self.n = gr.Slider(1, MAX_PAGE_N, value=20, step=1, label="Samples per value (N)", elem_id="pg-sweep-n",
                               info=f"N × values at most {MAX_SWEEP_SAMPLES}.")
            self.tokens = gr.Slider(1, MAX_TOKENS, value=16, step=1, label="Tokens per sample", elem_id="pg-sweep-tokens")

    def _answer_layout(self) -> None:
        with gr.Row():
            self.extract = gr.Dropdown([NO_EXTRACTOR, *EXTRACTOR_KINDS], value=NO_EXTRACTOR, label="Answer extractor",
                                       elem_id="pg-sweep-extract", min_width=160,
                                       info="none: the whole text is the answer.")
            self.argument = gr.Textbox("", label="Its argument", elem_id="pg-sweep-argument", min_width=160,
                                       placeholder="regex: a pattern · json: a field · choices: A|B|C")
            self.known = gr.Textbox("", label="Known answer (the checker)", elem_id="pg-sweep-known", min_width=160,
                                    placeholder="e.g. 12 (several: 12|twelve)", info="Adds accuracy.")

    def _rules_layout(self) -> None:
        with gr.Accordion("Answer rules: which answer do the samples give?", open=True, elem_id="pg-rules"):
            gr.Markdown(RULES_INTRO, elem_classes=["pg-summary"])
            with gr.Row():
                self.source = gr.Dropdown(point_choices(None), value=FRESH, label="Samples (a sweep point's, or new)", elem_id="pg-rules-source",
                                          min_width=260, scale=2)
                self.branches = gr.Slider(0, 20, value=DEFAULT_BRANCHES, step=1, label="CoT-decoding branches (k)",
                                          elem_id="pg-rules-branches", info="0: no CoT-decoding.")
            with gr.Row():
                self.window = gr.Number(DEFAULT_WINDOW, precision=0, label="DeepConf window (tokens)",
                                        elem_id="pg-rules-window", min_width=120)
                self.eta = gr.Slider(1, 100, value=DEFAULT_ETA, step=1, label="DeepConf keeps the top η%",
                                     elem_id="pg-rules-eta")
                self.verify = gr.Textbox("", label="Verifier (optional)", elem_id="pg-rules-verify", min_width=160,
                                         placeholder="exact:12 · regex:PATTERN · json:SCHEMA")
            self.rules_run = gr.Button("Pick the answers", variant="primary", elem_id="pg-rules-run")
            self.rules_html = gr.HTML("", elem_id="pg-rules-table")
            self.rules_plot = plot_component(None, show_label=False, visible=False, elem_id="pg-rules-plot")

    def wire(self, shared: Shared, store: ModelStore) -> None:
        self._wire_sweep(shared, store)
        self._wire_rules(shared, store)

        def grid_of(strategy: str, name: Any) -> dict[Any, Any]:
            if not name or name not in sweepable(strategy):
                return {}
            start, stop, about = suggested_grid(strategy, name)
            return {self.start: start, self.end: stop, self.about: about}

        def on_strategy(strategy: str, current: Any) -> Any:
            """Another strategy: its parameters; where the one shown is not among them, the grid moves to the
            new one's range (a link's restore names a parameter of its strategy, so its grid stays)."""
            names = sweepable(strategy)
            name = first_param(names, current)
            return keyed({self.param: gr.update(choices=names, value=name),
                          **(grid_of(strategy, name) if name != current else {})})

        def on_param(strategy: str, name: Any) -> Any:
            return keyed(grid_of(strategy, name))

        def on_point(record: dict[str, Any] | None, evt: gr.EventData) -> Any:
            """A click on a point of the chart: the rules' samples become that point's, shown at once."""
            index = event_data(evt).get("step")
            if not record or not isinstance(index, int) or not 0 <= index < len(record.get("points", [])):
                return keyed({})
            return keyed({self.source: gr.update(value=str(index)), self.rules_html: point_html(record, index),
                          self.rules_plot: gr.update(visible=False)})

        self.hook.click(on_point, [self.record], [self.source, self.rules_html, self.rules_plot], **QUIET)
        grid_boxes = [self.start, self.end, self.about]
        shared.strategy.change(on_strategy, [shared.strategy, self.param], [self.param, *grid_boxes], **QUIET)
        # .input, a person's choice: a link's restore sets the parameter and its own grid together
        self.param.input(on_param, [shared.strategy, self.param], grid_boxes, **QUIET)
        self.stop.click(events.request_stop, None, None, queue=False, api_visibility="private")

    def _wire_sweep(self, shared: Shared, store: ModelStore) -> None:
        inputs = shared.config_inputs | {self.param, self.scale, self.start, self.end, self.count, self.n, self.tokens,
                                         self.extract, self.argument, self.known, shared.theme}

        def on_sweep(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
            cfg = shared.split_config(values)
            grid_of = grid_values(values[self.start], values[self.end], values[self.count], values[self.scale])
            req = sweep_request(cfg, values[self.tokens], grammar_of(cfg))
            log_x, theme = values[self.scale] == "log", values[shared.theme]
            record = None
            for fig, status, record in sweep_view(store, req, values[self.param], grid_of, values[self.n],
                                                  extractor_spec(values[self.extract], values[self.argument]),
                                                  known_answers(values[self.known]), log_x, throttled(events.progress(progress)),
                                                  events.stop_requested):
                yield keyed({self.plot: plot_value(fig, theme), self.status: status})
            assert record is not None
            record = {**record, "system": req.system, "chat": req.chat, "dtype": req.dtype,
                      "grid": grid_spec(values[self.start], values[self.end], values[self.count], values[self.scale])}
            yield keyed({self.record: record, self.file: write_sweep_json(record),
                         self.source: gr.update(choices=point_choices(record), value=FRESH)})

        self.run.click(handler(on_sweep, 1, True, status=self.status), inputs,
                       [self.plot, self.status, self.record, self.file, self.source], api_visibility="private",
                       show_progress="full", show_progress_on=[self.status], **MODEL_EVENT)

    def _wire_rules(self, shared: Shared, store: ModelStore) -> None:
        inputs = shared.config_inputs | {self.record, self.source, self.n, self.tokens, self.extract, self.argument,
                                         self.known, self.verify, self.branches, self.window, self.eta, shared.theme}

        def on_rules(values: dict[Any, Any], progress: Any = None) -> Iterator[Any]:
            cfg = shared.split_config(values)
            req = sweep_request(cfg, values[self.tokens], grammar_of(cfg))
            html, fig, _ = rules_view(store, req, values[self.source], values[self.record], values[self.n],
                                      extractor_spec(values[self.extract], values[self.argument]),
                                      values[self.verify], known_answers(values[self.known]), values[self.branches],
                                      values[self.window], values[self.eta], throttled(events.progress(progress)))
            yield keyed({self.rules_html: html,
                         self.rules_plot: gr.update(value=plot_value(fig, values[shared.theme]), visible=fig is not None)})

        self.rules_run.click(handler(on_rules, 1, True, status=self.rules_html), inputs,
                             [self.rules_html, self.rules_plot], api_visibility="private", show_progress="full",
                             **MODEL_EVENT)


def grammar_of(cfg: dict[str, Any]) -> dict[str, str] | None:
    """The sidebar's grammar controls as a Request's grammar: None for "none" or an empty text."""
    kind = str(cfg.get("grammar_kind") or "none").strip()
    text = cfg.get("grammar_text")
    return None if kind == "none" or not str(text or "").strip() else {"kind": kind, "text": str(text)}
