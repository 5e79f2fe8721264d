"""The Gradio page: controls derived from the registry, streamed text beside the step charts.

Two layers live here. The handlers (``generate``, ``compare``, ``select_step``,
``export_pngs``, ``share_query``, ``restore``...) are plain functions: primitives
in, text and figures out, callable from tests without a browser. ``build_demo``
wires them to components. Strategy controls are generated from each strategy's
Params dataclass, one component per (strategy, parameter), so a new strategy
file adds its controls without touching this module.

Serving: one ModelStore is passed in (no module-global model); every model event
shares the concurrency group ``model`` with limit 1 on top of the store's lock;
the engine caps prompt length and ``max_new_tokens`` for API callers too, and each
run's time (and beam rows x tokens) by the budget read from the environment at
start (``playground.serving.budget``).
"""
from __future__ import annotations

# ZeroGPU on Hugging Face Spaces: `spaces` must be imported before torch initialises CUDA.
try:
    import spaces  # type: ignore[import-not-found]
except ImportError:
    spaces = None

import dataclasses  # noqa: E402
import html  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Iterator, Sequence  # noqa: E402

import gradio as gr  # noqa: E402
import plotly.graph_objects as go  # noqa: E402

from playground.charts import figures as charts  # noqa: E402

from playground.serving import memory  # noqa: E402

from playground.ui import events, share  # noqa: E402
from playground.ui.events import (MODEL_EVENT, QUIET, chat_flag, event_data, handler, is_chat_model,  # noqa: E402
                                  plot_component, plot_value, text_js)

from playground.ui import branches as ui_branches  # noqa: E402

from playground.ui import whatif as ui_whatif  # noqa: E402
from playground.whatif.branches import parse_path  # noqa: E402
from playground.serving.budget import FINISH_REASON as OUT_OF_TIME  # noqa: E402
from playground.serving.budget import Budget  # noqa: E402
from playground.models.dtypes import DTYPES  # noqa: E402
from playground.models.fast.check import describe_record  # noqa: E402
from playground.engine import MAX_SEED, Request  # noqa: E402
from playground.engine import stream as engine_stream  # noqa: E402
from playground.serving.model_keys import KeyPolicy  # noqa: E402
from playground import ASSETS  # noqa: E402
from playground.models import DEFAULT_MODEL, MAX_NEW_TOKENS, OFFLINE, ModelStore, Progress, on_space, spec_for  # noqa: E402
from playground.trace import Trace  # noqa: E402
from playground.charts.theme import themed  # noqa: E402
from playground.charts.common import View  # noqa: E402
from playground.charts.views import strategy_views  # noqa: E402
from playground.errors import InvalidRequest  # noqa: E402
from strategies.params import describe  # noqa: E402
from strategies.registry import StrategySpec, all_strategies, get_strategy  # noqa: E402
from strategies.sampling.samplers import PRESETS, SAMPLER_STAGES, SamplerParams, expand_order  # noqa: E402

QUEUE_MAX = 32
QUEUE_NOTE = ("One run at a time: this server keeps one model busy for one visitor. While others are "
              "generating, your run waits in the queue; its position shows over the text.")
REFRESH_SECONDS = 0.8  # charts are re-sent whole: redraw at most this often while streaming
VIEW_PLOTS = 4  # plot slots for strategy-specific views (beam tree, rounds, contrastive...)
COMPARE_VIEW_PLOTS = 2  # the same on each Compare side (the tree, the round detail...)
HUB_MODELS = ("openai-community/gpt2", "openai-community/gpt2-large", "HuggingFaceTB/SmolLM2-360M-Instruct",
              "HuggingFaceTB/SmolLM2-1.7B-Instruct")

Decoder = Callable[[Request, "Progress | None"], Iterator[Trace]]


# --- controls derived from the registry ----------------------------------------------------------

@dataclass(frozen=True)
class Control:
    """One generated control: a strategy's parameter as a slider, number, dropdown, checkbox or textbox."""

    strategy: str
    name: str
    kind: str  # "slider", "number", "dropdown", "checkbox", "textbox"
    default: Any
    info: str
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None
    choices: tuple[Any, ...] | None = None
    integer: bool = False

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def strategies_in_order() -> list[StrategySpec]:
    """The registry's strategies in its family order (greedy first)."""
    return all_strategies()


def controls_for(spec: StrategySpec) -> list[Control]:
    """The controls of one strategy, read from its Params dataclass metadata (strategies.params.describe)."""
    out = []
    for d in describe(spec.params):
        kind, common = d["type"], dict(strategy=spec.name, name=d["name"], default=d["default"],
                                       info=d["help"])
        if d.get("choices"):
            out.append(Control(kind="dropdown", choices=tuple(d["choices"]), **common))
        elif kind == "bool":
            out.append(Control(kind="checkbox", **common))
        elif kind == "str":
            out.append(Control(kind="textbox", **common))
        else:
            out.append(_numeric_control(d, common, integer=kind == "int"))
    return out


def _numeric_control(d: dict[str, Any], common: dict[str, Any], integer: bool) -> Control:
    """A slider over the declared range (ending at ui_max where given); a number box when unbounded."""
    step = d.get("step") or (1 if integer else 0.01)
    low, high = d.get("low"), d.get("ui_max") if d.get("ui_max") is not None else d.get("high")
    if low is None or high is None or (high - low) / step > 5000:
        return Control(kind="number", minimum=d.get("low"), maximum=d.get("high"), step=step, integer=integer,
                       **common)
    if d.get("low_open"):
        low += step  # the open end itself is refused, so the slider starts one step inside
    if d.get("high_open") and d.get("ui_max") is None:
        high -= step
    high = max(high, common["default"])
    return Control(kind="slider", minimum=low, maximum=high, step=step, integer=integer, **common)


def make_component(c: Control, elem_id: str) -> gr.Component:
    common = dict(label=c.label, info=c.info, elem_id=elem_id)
    if c.kind == "slider":
        return gr.Slider(minimum=c.minimum, maximum=c.maximum, value=c.default, step=c.step,
                         precision=0 if c.integer else None, **common)
    if c.kind == "number":
        return gr.Number(value=c.default, minimum=c.minimum, maximum=c.maximum, step=c.step,
                         precision=0 if c.integer else None, **common)
    if c.kind == "dropdown":
        return gr.Dropdown(choices=list(c.choices or ()), value=c.default, **common)
    if c.kind == "checkbox":
        return gr.Checkbox(value=bool(c.default), **common)
    return gr.Textbox(value=str(c.default), **common)


def control_update(c: Control, value: Any) -> Any:
    """An update setting ``c`` to ``value``; a slider grows its end when a link carries a bigger value."""
    if c.kind == "slider" and isinstance(value, (int, float)) and c.maximum is not None and value > c.maximum:
        return gr.update(value=value, maximum=value)
    return gr.update(value=value)


def collect_params(controls: Sequence[Control], strategy: str, values: Sequence[Any]) -> dict[str, Any]:
    """The values of ``strategy``'s controls, by parameter name (the flat list is every strategy's)."""
    out = {}
    for c, v in zip(controls, values):
        if c.strategy == strategy:
            out[c.name] = int(v) if c.integer and isinstance(v, float) and v.is_integer() else v
    return out


# --- generation: frames of the growing trace --------------------------------------------------------

@dataclass
class Frame:
    """What the page shows after one more token. ``figures`` / ``views`` are None between redraws."""

    trace: dict[str, Any]
    html: str
    status: str
    step: int | None
    figures: tuple[go.Figure, go.Figure, go.Figure] | None
    views: list[View] | None
    final: bool


class _TraceDicts:
    """Trace -> its JSON dict during streaming, converting each step once (the full to_dict grows
    with the run and would make every token slower than the last)."""

    def __init__(self) -> None:
        self._steps: dict[int, tuple[Any, dict[str, Any]]] = {}

    def __call__(self, trace: Trace) -> dict[str, Any]:
        d = dataclasses.replace(trace, steps=[]).to_dict()
        d["steps"] = [self._step(s) for s in trace.steps]
        return d

    def _step(self, step: Any) -> dict[str, Any]:
        hit = self._steps.get(id(step))
        if hit is None or hit[0] is not step:
            hit = (step, step.to_dict())
            self._steps[id(step)] = hit
        return hit[1]


def status_html(trace: dict[str, Any], final: bool, note: str = "") -> str:
    """One line under the text: model, strategy, chain, tokens, speed, why it stopped."""
    timing = trace.get("timing") or {}
    chain = " → ".join(trace.get("chain") or []) or trace.get("strategy", "")
    state = {"eos": "finished at end-of-sequence", "length": "reached max new tokens",
             "stopped": "stopped",
             OUT_OF_TIME: "stopped: this server's time budget per run is used up"
             }.get(trace.get("finish_reason", ""), "generating…")
    if not final and state != "generating…":
        state = "generating…"
    model = f"<b>{_esc(trace.get('model', ''))}</b>" + (f" ({_esc(trace['dtype'])})" if trace.get("dtype") else "")
    if trace.get("weights_check"):  # how the weights compared with float32 on this CPU, on hover
        model = f'<span class="pg-weights" title="{_esc(describe_record(trace["weights_check"]))}">{model}</span>'
    parts = [model, _esc(trace.get("strategy", "")),
             f"chain: {_esc(chain)}", f"seed {trace.get('seed', 0)}", f"{len(trace.get('tokens') or [])} tokens",
             f"{timing.get('tokens_per_second', 0):.1f} tok/s", state + (f" · {_esc(note)}" if note else "")]
    return '<div class="pg-status">' + " · ".join(parts) + "</div>"


def _esc(text: Any) -> str:
    return html.escape(str(text))


def default_decoder(store: ModelStore, budget: Budget | None = None) -> Decoder:
    """engine.stream on ``store`` within ``budget`` (default: read from the environment now);
    on a ZeroGPU Space the GPU work runs under ``spaces.GPU``."""
    budget = budget or Budget.from_env()

    def decode(req: Request, progress: Progress | None = None) -> Iterator[Trace]:
        try:
            yield from engine_stream(store, req, progress, budget)
        finally:
            memory.trim()  # the run's buffers are free: their pages go back to the system

    if spaces is None or not on_space():
        return decode

    @spaces.GPU(duration=120)
    def decode_on_gpu(req: Request) -> Iterator[Trace]:
        yield from engine_stream(store, req, None, budget)  # the GPU worker cannot report back to gr.Progress

    return lambda req, progress=None: decode_on_gpu(req)


def generate(store: ModelStore, model: str, strategy: str, prompt: str, params: dict[str, Any] | None = None,
             seed: int = 0, max_new_tokens: int = share.DEFAULT_MAX_NEW_TOKENS, system: str = "",
             chat: bool | None = None, progress: Progress | None = None, refresh_seconds: float = REFRESH_SECONDS,
             final_step: str | int = "uncertain", decoder: Decoder | None = None, compact: bool = False,
             dtype: str = "auto", forced: dict[int, int | str] | None = None) -> Iterator[Frame]:
    """Stream one run as Frames: text after every token, charts every ``refresh_seconds`` and at the end.

    The first frame carries text only so the first token shows as early as possible; charts follow
    ``refresh_seconds`` later (so a run that ends sooner is drawn once).
    ``final_step``: which step the last frame selects, "uncertain" (highest model entropy), "first",
    or a step number (a branch shows its forced step).
    ``forced``: step -> token (id or text) the run takes there (a branch; strategies.forcing).
    ``compact``: charts for a half-width column (compare).
    ``dtype``: the weights' dtype (playground.models.dtypes: auto, float32, bfloat16).
    Raises InvalidRequest (and its ModelUnavailable) with the validation message.
    """
    req = Request(model=model, strategy=strategy, prompt=prompt, params=dict(params or {}), seed=seed,
                  max_new_tokens=max_new_tokens, system=system or "", chat=chat, dtype=dtype, forced=dict(forced or {}))
    decode = decoder or default_decoder(store)
    dicts, last_draw, draw_cost, trace = _TraceDicts(), 0.0, 0.0, None
    show_prompt = _show_prompt(model, chat)
    for k, trace in enumerate(decode(req, progress)):
        d = dicts(trace)
        step = len(d["steps"]) - 1 if d["steps"] else None
        now = time.perf_counter()
        if k == 0:
            last_draw = now  # the first token goes out alone; a quick run is drawn once, at its end
        # Redraw no more often than refresh_seconds, and never spend over a quarter of the time drawing.
        redraw = k > 0 and now - last_draw >= max(refresh_seconds, 3 * draw_cost)
        figures = views = None
        if redraw and step is not None:
            figures, views = _figures(d, step, compact), strategy_views(d, step)
            draw_cost, last_draw = time.perf_counter() - now, time.perf_counter()
        yield Frame(d, charts.token_html(d, step, show_prompt), status_html(d, final=False), step, figures, views,
                    final=False)
    if trace is None:
        return
    full = trace.to_dict()
    step = _final_step(full, final_step)
    yield Frame(full, charts.token_html(full, step, show_prompt), status_html(full, final=True), step,
                _figures(full, step, compact) if step is not None else None, strategy_views(full, step), final=True)


def _final_step(trace: dict[str, Any], final_step: str | int) -> int | None:
    if not trace["steps"]:
        return None
    if final_step == "uncertain":
        return charts.most_uncertain_step(trace)
    return charts.clamp_step(trace, 0 if final_step == "first" else final_step)


def _figures(trace: dict[str, Any], step: int | None, compact: bool = False
             ) -> tuple[go.Figure, go.Figure, go.Figure]:
    if step is None:
        empty = charts.empty_figure("This run recorded no steps")
        return empty, empty, charts.overview_figure(trace)
    return charts.step_figures(trace, step, compact)


def select_step(trace: dict[str, Any] | None, step: Any, show_prompt: bool = False, compact: bool = False
                ) -> tuple[str, go.Figure, go.Figure, go.Figure] | None:
    """(text html, distribution, waterfall, overview) with ``step`` selected; None without a trace."""
    k = charts.clamp_step(trace, step)
    if trace is None or k is None:
        return None
    return (charts.token_html(trace, k, show_prompt), *charts.step_figures(trace, k, compact))


def compare(store: ModelStore, model: str, prompt: str, strategy_a: str, params_a: dict[str, Any],
            strategy_b: str, params_b: dict[str, Any], seed: int = 0,
            max_new_tokens: int = share.DEFAULT_MAX_NEW_TOKENS, system: str = "", chat: bool | None = None,
            progress: Progress | None = None, refresh_seconds: float = REFRESH_SECONDS,
            decoder: Decoder | None = None, dtype: str = "auto") -> Iterator[tuple[Frame | None, Frame | None]]:
    """The same prompt and seed through two strategies, one token of each in turn, so both texts grow
    side by side. Both end on step 0, where the two saw the same context. Errors name the side."""
    strategies = {"A": strategy_a, "B": strategy_b}
    runs = {side: generate(store, model, strategies[side], prompt, params, seed, max_new_tokens, system, chat,
                           progress, refresh_seconds, final_step="first", decoder=decoder, compact=True,
                           dtype=dtype)
            for side, params in (("A", params_a), ("B", params_b))}
    last: dict[str, Frame | None] = {"A": None, "B": None}
    live = set(runs)
    while live:
        for side in ("A", "B"):
            if side not in live:
                continue
            try:
                last[side] = next(runs[side])
            except StopIteration:
                live.discard(side)
            except InvalidRequest as err:  # validation happens on a run's first step: name the side
                raise InvalidRequest(f"{side} ({strategies[side]}): {err}") from None
        yield last["A"], last["B"]


# --- export ---------------------------------------------------------------------------------------------

def export_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "decoding-playground"
    path.mkdir(parents=True, exist_ok=True)
    return path


def trace_filename(trace: dict[str, Any], suffix: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in f"{trace['model']}-{trace['strategy']}")
    return f"trace-{safe}-seed{trace['seed']}-{int(time.time() * 1000) % 10**9}{suffix}"


def prune_exports(max_age_s: float = 3600) -> None:
    """Forget exports older than ``max_age_s``: a long-running server writes one file per run."""
    cutoff = time.time() - max_age_s
    for path in export_dir().glob("trace-*"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:  # another worker removed it first
            pass


def write_trace_json(trace: dict[str, Any]) -> str:
    """The trace as a pretty JSON file for download; returns its path."""
    prune_exports()
    path = export_dir() / trace_filename(trace, ".json")
    path.write_text(json.dumps(trace, indent=1, ensure_ascii=False), encoding="utf-8")
    return str(path)


def png_export_available() -> bool:
    """kaleido renders static images through a Chromium; both must be present."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    return any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome"))


def export_pngs(trace: dict[str, Any] | None, step: Any, theme: str = "light", scale: float = 2.0) -> list[str]:
    """The step's three charts (and any strategy views) as PNG files, in the theme the page shows.

    One kaleido session renders them all (kaleido starts a Chromium per session)."""
    import plotly.io as pio

    k = charts.clamp_step(trace, step)
    if trace is None or k is None:
        raise InvalidRequest("generate something first: there is no trace to export")
    figs = dict(zip(("distribution", "chain", "overview"), charts.step_figures(trace, k)))
    for i, view in enumerate(strategy_views(trace, k)):
        if view.figure is not None:
            figs[f"view{i + 1}"] = view.figure
    base = trace_filename(trace, "")
    paths = [str(export_dir() / f"{base}-step{k}-{name}.png") for name in figs]
    painted = [themed(f, theme, export=True) for f in figs.values()]
    try:
        pio.write_images(painted, paths, width=1280, height=[int(f.layout.height or 560) for f in painted],
                         scale=scale)
    except Exception as err:  # kaleido reports a missing or broken Chromium in several ways
        raise InvalidRequest(f"PNG export needs kaleido and a Chromium browser: {err}") from None
    return paths


# --- share links ------------------------------------------------------------------------------------

def share_query(model: str, strategy: str, prompt: str, system: str, chat: bool, seed: Any, max_new_tokens: Any,
                params: dict[str, Any], compare_strategy: str, compare_params: dict[str, Any],
                run: str = "generate", forced: str = "") -> str:
    """The page's configuration as a query string ('?model=...'), to append to the page's address."""
    cfg = share.Config(model=model, strategy=strategy, prompt=prompt or "", system=system or "", chat=bool(chat),
                       seed=int(seed or 0), max_new_tokens=int(max_new_tokens or share.DEFAULT_MAX_NEW_TOKENS),
                       params=params, compare_strategy=compare_strategy, compare_params=compare_params, run=run,
                       forced=(forced or "").strip())
    return share.encode(cfg)


# --- model choices ----------------------------------------------------------------------------------

def model_choices(policy: KeyPolicy | None = None) -> list[tuple[str, str]]:
    """Offline models always; hub models where the network allows (a Space, or PLAYGROUND_HUB=1);
    only those ``policy`` (``$PLAYGROUND_MODELS``) permits."""
    policy = policy or KeyPolicy.from_env(OFFLINE)
    choices = [(f"{key} · {spec.title}", key) for key, spec in OFFLINE.items()]
    if on_space() or os.environ.get("PLAYGROUND_HUB") == "1":
        choices += [(f"{hub} (hub)", hub) for hub in HUB_MODELS]
    return [(label, key) for label, key in choices if policy.permits(key)]


# --- examples: one click per phenomenon -------------------------------------------------------------

@dataclass(frozen=True)
class Example:
    label: str
    config: share.Config
    note: str


def examples() -> list[Example]:
    """Each shows one phenomenon; the configuration goes through the same path as a share link."""
    cfg = share.Config
    toy = dict(model="toy", prompt="1 2", max_new_tokens=12, seed=4)
    gemma = dict(model="gemma3-270m", prompt="The best way to learn a new language is", max_new_tokens=40)
    hot = dict(model="smollm2-135m", prompt="Write one sentence about the ocean.", seed=7, max_new_tokens=40)
    return [
        Example("Toy 70/30 · greedy", cfg(strategy="greedy", run="generate", **toy),
                "greedy always takes ' a' (p 0.7): the 30% branch is never seen."),
        Example("Toy 70/30 · temperature", cfg(strategy="sampling", params={"temperature": 1.0}, run="generate",
                                               **toy),
                "sampling at T=1 takes ' the' three times in ten; this seed does."),
        Example("Toy · greedy vs sampling", cfg(strategy="greedy", compare_strategy="sampling",
                                                compare_params={"temperature": 1.0}, run="compare", **toy),
                "the same prompt and seed, side by side: the sampler takes the other branch."),
        Example("Gemma · greedy loop", cfg(strategy="greedy", run="generate", **gemma),
                "greedy decoding of a small base model repeats the same sentence."),
        Example("Gemma · repetition penalty", cfg(strategy="sampling", params={"temperature": 0.0,
                                                                               "repetition_penalty": 1.3},
                                                  run="generate", **gemma),
                "still greedy (T=0), but tokens already in the text are penalised: the loop breaks."),
        Example("Top-p vs min-p at T=2", cfg(strategy="sampling", params={"temperature": 2.0, "top_p": 0.9},
                                             compare_strategy="sampling",
                                             compare_params={"temperature": 2.0, "min_p": 0.1}, run="compare",
                                             **hot),
                "at T=2 the nucleus swells with junk tokens; min-p scales its cut with the top token."),
        Example("Toy · XTC", cfg(strategy="sampling", params={"xtc_probability": 1.0, "xtc_threshold": 0.2},
                                 run="generate", **toy),
                "both ' a' (0.7) and ' the' (0.3) pass the 0.2 threshold: XTC removes the top one, so ' the' wins."),
        Example("Gemma · DRY vs penalty", cfg(strategy="sampling", params={"temperature": 0.0,
                                                                         "repetition_penalty": 1.3},
                                              compare_strategy="sampling",
                                              compare_params={"temperature": 0.0, "dry_multiplier": 0.8,
                                                              "dry_sequence_breakers": '":", "\\"", "*"'},
                                              run="compare", **gemma),
                "both greedy: the penalty pushes away every word already used; DRY only the token that would "
                "continue a repeat (here across lines: newline is no breaker), and the loop gives way."),
        Example("Top-nσ vs top-p at T=3", cfg(strategy="sampling", params={"temperature": 3.0, "top_p": 0.9},
                                              compare_strategy="sampling",
                                              compare_params={"temperature": 3.0, "top_nsigma": 1.0},
                                              run="compare", **hot),
                "top-nσ keeps the same tokens at any temperature; top-p at T=3 lets noise in."),
        Example("Mirostat · μ settles", cfg(strategy="sampling", params={"mirostat_tau": 3.0, "mirostat_eta": 0.1},
                                            run="generate", **{**hot, "max_new_tokens": 120}),
                "μ starts at 2τ and moves each step until the chosen tokens' surprise averages τ (its own chart)."),
    ]


# --- the page -----------------------------------------------------------------------------------------

DEFAULT_PROMPT = "Explain in one sentence why the sky is blue."

RUN_JS = """(run) => {
  const click = (id) => { const b = document.getElementById(id); if (b) b.click(); };
  if (run === 'generate') setTimeout(() => click('pg-generate'), 50);
  if (run === 'compare') setTimeout(() => click('pg-compare-run'), 250);
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


@dataclass
class Panel:
    """The generated controls of every strategy; only the selected strategy's column is visible."""

    controls: list[Control]
    components: list[gr.Component]
    groups: dict[str, gr.Column]

    def params(self, strategy: str, values: Sequence[Any]) -> dict[str, Any]:
        return collect_params(self.controls, strategy, values)

    def visibility(self, strategy: str) -> list[Any]:
        return [gr.update(visible=name == strategy) for name in self.groups]

    def restore(self, strategy: str, params: dict[str, Any]) -> list[Any]:
        """Set ``strategy``'s controls to ``params`` (the rest of them to defaults); leave others alone."""
        return [control_update(c, params.get(c.name, c.default)) if c.strategy == strategy else gr.skip()
                for c in self.controls]


def build_panel(prefix: str, selected: str) -> Panel:
    controls, components, groups = [], [], {}
    for spec in strategies_in_order():
        with gr.Column(visible=spec.name == selected, elem_id=f"pg-{prefix}-{spec.name}",
                       elem_classes=["pg-params"]) as col:
            made = controls_for(spec)
            if not made:
                gr.Markdown("_No parameters: it always takes the most probable token._")
            for c in made:
                controls.append(c)
                components.append(make_component(c, f"pg-{prefix}-{spec.name}-{c.name}"))
                if c.name == "order" and issubclass(spec.params, SamplerParams):
                    _reorder_controls(components[-1], f"pg-{prefix}-{spec.name}")
        groups[spec.name] = col
    return Panel(controls, components, groups)


def move_stage(order: str, stage: str, delta: int) -> str:
    """``order`` (a preset name or stage names) with ``stage`` moved ``delta`` places, written out in full;
    an order that does not parse starts again from the transformers preset."""
    try:
        names = expand_order(order or "transformers").split(",")
    except InvalidRequest:
        names = list(PRESETS["transformers"])
    if stage in names:
        i = names.index(stage)
        names.insert(min(max(i + delta, 0), len(names) - 1), names.pop(i))
    return ",".join(names)


def _reorder_controls(order_box: gr.Component, elem_id: str) -> None:
    """Presets and up / down buttons under the order textbox: the chain is reordered without typing."""
    with gr.Row(equal_height=True, elem_classes=["pg-reorder"]):
        preset = gr.Dropdown(choices=list(PRESETS), value=None, label="preset order", elem_id=f"{elem_id}-preset",
                             min_width=120)
        stage = gr.Dropdown(choices=list(SAMPLER_STAGES), value=SAMPLER_STAGES[0], label="move stage",
                            elem_id=f"{elem_id}-stage", min_width=120)
        up = gr.Button("↑ earlier", size="sm", elem_id=f"{elem_id}-up", min_width=60)
        down = gr.Button("↓ later", size="sm", elem_id=f"{elem_id}-down", min_width=60)
    preset.input(lambda p: p, preset, order_box, **QUIET)
    up.click(lambda o, st: move_stage(o, st, -1), [order_box, stage], order_box, **QUIET)
    down.click(lambda o, st: move_stage(o, st, 1), [order_box, stage], order_box, **QUIET)


def strategy_summary(name: str) -> str:
    try:
        spec = get_strategy(name)
    except InvalidRequest:
        return ""
    return f"**{spec.name}** · {spec.summary}"


def list_strategies() -> str:
    """Every strategy with its family, summary and parameters (name, type, default, range, help), as JSON."""
    out = [dict(name=s.name, family=s.family, summary=s.summary, params=describe(s.params))
           for s in strategies_in_order()]
    return json.dumps(out, default=list)


list_strategies.__signature__ = __import__("inspect").Signature([], return_annotation=str)  # type: ignore


def api_generate_stream(decoder: Decoder, model: str, strategy: str, prompt: str, params_json: str, seed: Any,
                        max_new_tokens: Any, system: str, chat: str, dtype: str = "auto"
                        ) -> Iterator[tuple[str, str]]:
    """The /generate endpoint: (text so far, "") after every token, then (text, trace JSON)."""
    try:
        params = json.loads(params_json or "{}")
    except json.JSONDecodeError as err:
        raise InvalidRequest(f"params must be a JSON object, got {params_json!r} ({err.msg})") from None
    if not isinstance(params, dict):
        raise InvalidRequest(f"params must be a JSON object, got {params_json!r}")
    chat_flag = {"auto": None, "true": True, "false": False, "": None}.get(str(chat).strip().lower())
    if chat_flag is None and str(chat).strip().lower() not in ("auto", ""):
        raise InvalidRequest(f"chat must be one of auto, true, false, got {chat!r}")
    req = Request(model=model, strategy=strategy, prompt=prompt, params=params, seed=seed,
                  max_new_tokens=max_new_tokens, system=system or "", chat=chat_flag, dtype=dtype or "auto")
    trace = None
    for trace in decoder(req, None):
        yield trace.text, ""
    if trace is not None:
        yield trace.text, trace.to_json()


def launch_kwargs() -> dict[str, Any]:
    """theme / css / head for ``demo.launch`` (Gradio 6 takes them there, not in Blocks)."""
    theme = gr.themes.Soft(primary_hue="blue", secondary_hue="amber", neutral_hue="slate",
                           font=[gr.themes.Font(f) for f in ("Inter", "ui-sans-serif", "system-ui", "sans-serif")],
                           font_mono=[gr.themes.Font(f) for f in ("JetBrains Mono", "ui-monospace", "monospace")])
    head = f"<script>{(ASSETS / 'playground.js').read_text(encoding='utf-8')}</script>"
    return dict(theme=theme, css=(ASSETS / "style.css").read_text(encoding="utf-8"), head=head,
                **mcp_kwargs())


def mcp_kwargs() -> dict[str, Any]:
    """``mcp_server=True`` where Gradio can serve MCP (its ``mcp`` extra is installed), so an agent
    can call /generate and /strategies as tools; nothing otherwise."""
    import importlib.util

    return {"mcp_server": True} if importlib.util.find_spec("mcp") is not None else {}


HEADER = """<div class="pg-header">
  <h1>Decoding Playground</h1>
  <p>Type a prompt, pick a model and a decoding strategy, and watch what the decoder really did at each
  step: the distribution it drew from, what each truncation cut, and the token it chose.</p>
</div>"""


class Side:
    """The output column of one run: status line, coloured text, and the three charts."""

    def __init__(self, key: str, compact: bool) -> None:
        self.key, self.compact = key, compact
        suffix = "" if key == "main" else f"-{key}"
        first = f"<div class=\"pg-status\">{'Ready.' if key == 'main' else key.upper()}</div>"
        self.status = gr.HTML(first, elem_id=f"pg-status{suffix}")
        self.text = gr.HTML(charts.token_html({}), js_on_load=text_js(key), elem_id=f"pg-text{suffix}",
                            min_height=90)
        if key == "main":
            gr.HTML(charts.legend_html())
        self.over = plot_component(charts.empty_figure(), show_label=False, elem_id=f"pg-overview-{key}")
        # the explore tab puts its step slider between the overview and the step's details
        self.step_slot = gr.Column() if key == "main" else None
        self.dist = plot_component(charts.empty_figure(), show_label=False, elem_id=f"pg-dist{suffix}")
        self.water = plot_component(charts.empty_figure(), show_label=False, elem_id=f"pg-waterfall{suffix}")
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
        return _step_view_updates(trace, step, theme, len(self.view_slots) - 1)

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


def stopped(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace whose run was cancelled mid-way says so; a run that had already ended keeps its reason."""
    if trace.get("finish_reason") in ("", "running", None):
        return dict(trace, finish_reason="stopped")
    return trace


class Page:
    """The components the handlers read and write (built by ``_layout``)."""

    model: gr.Dropdown
    dtype: gr.Dropdown
    strategy: gr.Dropdown
    summary: gr.Markdown
    panel: Panel
    seed: gr.Number
    random_seed: gr.Checkbox
    theme: gr.Textbox
    params_box: gr.Accordion
    max_new: gr.Slider
    chat: gr.Checkbox
    system: gr.Textbox
    prompt: gr.Textbox
    generate: gr.Button
    stop: gr.Button
    link: gr.Button
    link_box: gr.Textbox
    example_buttons: list[gr.Button]
    example_note: gr.Markdown
    tabs: gr.Tabs
    explore_tab: gr.Tab
    compare_tab: gr.Tab
    main: Side
    step: gr.Slider
    view_plots: list[gr.Plot]
    view_html: gr.HTML
    trace_file: gr.File
    png: gr.Button
    png_files: gr.File
    compare_strategy: gr.Dropdown
    compare_summary: gr.Markdown
    compare_panel: Panel
    compare_run: gr.Button
    compare_step: gr.Slider
    sides: dict[str, Side]
    api_in: list[gr.Component]
    api_out: list[gr.Component]
    api_trigger: gr.Button
    run_flag: gr.Textbox
    trace: gr.State
    traces: dict[str, gr.State]
    mode: gr.State
    whatif: ui_whatif.WhatIf
    branches: ui_branches.BranchPanel
    forced: gr.Textbox

    @property
    def config_inputs(self) -> list[gr.Component]:
        """Everything a share link carries, in ``split_config``'s order."""
        return [self.model, self.strategy, self.prompt, self.system, self.chat, self.seed, self.max_new,
                *self.panel.components, self.compare_strategy, *self.compare_panel.components, self.forced]

    @property
    def run_inputs(self) -> list[gr.Component]:
        """What a run reads: the share link's configuration, the weights' dtype, the random-seed toggle,
        the page theme."""
        return [*self.config_inputs, self.dtype, self.random_seed, self.theme]

    def split_config(self, values: Sequence[Any]) -> dict[str, Any]:
        """The values of ``config_inputs`` as share_query's keyword arguments."""
        n = len(self.panel.components)
        model, strategy, prompt, system, chat, seed, max_new = values[:7]
        b_strategy = values[7 + n]
        return dict(model=model, strategy=strategy, prompt=prompt, system=system, chat=chat, seed=seed,
                    max_new_tokens=max_new, params=self.panel.params(strategy, values[7:7 + n]),
                    compare_strategy=b_strategy, compare_params=self.compare_panel.params(b_strategy, values[8 + n:-1]),
                    forced=values[-1] or "")

    @property
    def restore_outputs(self) -> list[Any]:
        return [self.model, self.strategy, self.prompt, self.system, self.chat, self.seed, self.max_new,
                *self.panel.components, *self.panel.groups.values(), self.summary, self.compare_strategy,
                *self.compare_panel.components, *self.compare_panel.groups.values(), self.compare_summary,
                self.tabs, self.run_flag, self.mode, self.forced]

    def apply_config(self, cfg: share.Config) -> list[Any]:
        """Updates setting every control to ``cfg`` (a share link or an example), in restore_outputs' order."""
        chat_model = is_chat_model(cfg.model)
        return [cfg.model, cfg.strategy, cfg.prompt, gr.update(value=cfg.system, visible=chat_model and cfg.chat),
                gr.update(value=cfg.chat, visible=chat_model), cfg.seed, cfg.max_new_tokens,
                *self.panel.restore(cfg.strategy, cfg.params), *self.panel.visibility(cfg.strategy),
                strategy_summary(cfg.strategy), cfg.compare_strategy,
                *self.compare_panel.restore(cfg.compare_strategy, cfg.compare_params),
                *self.compare_panel.visibility(cfg.compare_strategy), strategy_summary(cfg.compare_strategy),
                gr.Tabs(selected="compare" if cfg.run == "compare" else "explore"), cfg.run,
                "compare" if cfg.run == "compare" else "generate", cfg.forced]


NUMERIC_PROMPT = "1 2"  # the toy models' own example: token ids, "once upon"


def prompt_for_model(model: str, prompt: str) -> str:
    """Keep ``prompt`` when ``model`` can take it; otherwise that kind of model's example prompt.
    Toy models read token numbers (and their few words); text models read text."""
    try:
        numeric = spec_for(model).numeric_prompt
    except InvalidRequest:
        return prompt
    is_numbers = bool(prompt.split()) and all(part.isdigit() for part in prompt.split())
    if numeric and not is_numbers:
        return NUMERIC_PROMPT
    if not numeric and is_numbers:
        return DEFAULT_PROMPT
    return prompt


def run_config(page: Page, values: Sequence[Any]) -> tuple[dict[str, Any], Any, str]:
    """(configuration, seed update, theme) from ``page.run_inputs``. With Random seed on, a fresh
    seed that the update writes back into the box, so the run can be repeated."""
    *config, dtype, random_on, theme = values
    cfg = dict(page.split_config(config), dtype=dtype)
    if not random_on:
        return cfg, gr.skip(), theme
    cfg["seed"] = random_seed()
    return cfg, gr.update(value=cfg["seed"]), theme


def random_seed() -> int:
    return secrets.randbelow(MAX_SEED + 1)


def _default_strategy(preferred: str) -> str:
    names = [s.name for s in strategies_in_order()]
    return preferred if preferred in names else names[0]


def _sidebar(page: Page) -> None:
    """The selected strategy's parameters (collapsible: closed on a phone), then seed and budget."""
    default = _default_strategy("sampling")
    chat_model = is_chat_model(DEFAULT_MODEL)
    page.summary = gr.Markdown(strategy_summary(default), elem_classes=["pg-summary"])
    with gr.Accordion("Strategy parameters", open=True, elem_id="pg-params") as page.params_box:
        page.panel = build_panel("p", default)
    page.seed = gr.Number(value=0, label="Seed", precision=0, elem_id="pg-seed",
                          info=f"An integer in [0, {MAX_SEED}]: the same seed gives the same run.")
    page.random_seed = gr.Checkbox(False, label="Random seed: a new one each run, written into the box",
                                   elem_id="pg-random-seed")
    page.max_new = gr.Slider(1, MAX_NEW_TOKENS, value=share.DEFAULT_MAX_NEW_TOKENS, step=1, label="Max new tokens",
                             elem_id="pg-max-new")
    page.chat = gr.Checkbox(value=True, label="Chat template", visible=chat_model, elem_id="pg-chat",
                            info="Wrap the prompt in the model's chat template (off: raw continuation).")
    page.system = gr.Textbox("", label="System prompt", lines=2, visible=chat_model, elem_id="pg-system")


def _top(page: Page) -> None:
    """What a visitor needs first, on a phone too: model, strategy, prompt, Generate."""
    names, default = [s.name for s in strategies_in_order()], _default_strategy("sampling")
    with gr.Row(equal_height=True, elem_id="pg-pickers"):
        page.model = gr.Dropdown(model_choices(), value=DEFAULT_MODEL, label="Model", allow_custom_value=True,
                                 elem_id="pg-model", min_width=220,
                                 info="Offline models always; any Hugging Face hub id where the network allows.")
        page.dtype = gr.Dropdown(list(DTYPES), value="auto", label="Weights", elem_id="pg-dtype", min_width=160,
                                 info="auto: on a CPU with native bfloat16, the model's own GGUF blocks (int4) where they "
                                      "run, else bfloat16; float32 elsewhere.")
        page.strategy = gr.Dropdown(names, value=default, label="Strategy", elem_id="pg-strategy", min_width=220,
                                    info="Its parameters are below.")
    page.prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=2, elem_id="pg-prompt")
    with gr.Row(elem_id="pg-actions"):
        page.generate = gr.Button("Generate", variant="primary", elem_id="pg-generate", scale=2)
        page.stop = gr.Button("Stop", variant="stop", elem_id="pg-stop", scale=1)
        page.link = gr.Button("Copy share link", elem_id="pg-copy-link", scale=1)
    gr.Markdown(QUEUE_NOTE, elem_classes=["pg-summary"], elem_id="pg-queue-note")
    page.link_box = gr.Textbox(label="Share link (copied)", visible=False, buttons=["copy"], elem_id="pg-link",
                               interactive=False)
    with gr.Row(elem_id="pg-examples", equal_height=True):
        gr.HTML('<span class="pg-examples-title">One click, one phenomenon:</span>')
        page.example_buttons = [gr.Button(ex.label, size="sm", elem_classes=["pg-example"]) for ex in examples()]
    page.example_note = gr.Markdown("", elem_classes=["pg-summary"], elem_id="pg-example-note")


def _explore_tab(page: Page) -> None:
    page.main = Side("main", compact=False)
    assert page.main.step_slot is not None
    with page.main.step_slot:
        page.step = gr.Slider(0, 1, value=0, step=1, label="Step shown below", elem_id="pg-step",
                              info="Drag, click a token or a bar above to inspect that step.")
    # each view's figure carries its own title: no Gradio label on top of it
    page.branches = ui_branches.layout()
    page.forced = page.branches.forced
    page.view_plots = [plot_component(visible=False, show_label=False, elem_id=f"pg-view-{i}")
                       for i in range(VIEW_PLOTS)]
    page.view_html = gr.HTML(visible=False, elem_id="pg-view-html")
    with gr.Accordion("Export", open=False, elem_id="pg-export"):
        page.trace_file = gr.File(label="Trace JSON (the exact record of the run)", elem_id="pg-trace-file")
        page.png = gr.Button("Render the charts as PNG on the server", size="sm", visible=png_export_available(),
                             elem_id="pg-png")
        page.png_files = gr.File(label="Chart PNGs", file_count="multiple", elem_id="pg-png-files")


def _compare_tab(page: Page) -> None:
    names, default = [s.name for s in strategies_in_order()], _default_strategy("greedy")
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


def _api_inputs(page: Page) -> None:
    """The /generate endpoint's own inputs (hidden): a script passes the strategy's params as JSON."""
    with gr.Column(visible=False):
        page.api_in = [gr.Textbox(label="model"), gr.Textbox(label="strategy"), gr.Textbox(label="prompt"),
                       gr.Textbox("{}", label="params"), gr.Number(0, label="seed", precision=0),
                       gr.Number(share.DEFAULT_MAX_NEW_TOKENS, label="max_new_tokens", precision=0),
                       gr.Textbox("", label="system"), gr.Textbox("auto", label="chat"),
                       gr.Textbox("auto", label="dtype")]
        page.api_out = [gr.Textbox(label="text"), gr.Textbox(label="trace_json")]
        page.api_trigger = gr.Button(visible=False)
        page.run_flag = gr.Textbox("", visible=False)
        page.theme = gr.Textbox("light", visible=False)  # "dark:390": the page's theme and width, read on load


def _layout() -> Page:
    page = Page()
    page.trace, page.mode = gr.State(None), gr.State("generate")  # mode: what a share link re-runs
    page.traces = {"a": gr.State(None), "b": gr.State(None)}
    gr.HTML(HEADER)
    with gr.Column(elem_id="pg-top"):
        _top(page)
    with gr.Row(equal_height=False, elem_id="pg-layout"):
        with gr.Column(scale=1, min_width=300, elem_id="pg-sidebar"):
            _sidebar(page)
        with gr.Column(scale=3, elem_id="pg-main"):
            with gr.Tabs(elem_id="pg-tabs") as page.tabs:
                with gr.Tab("Explore", id="explore") as page.explore_tab:
                    _explore_tab(page)
                with gr.Tab("Compare", id="compare") as page.compare_tab:
                    _compare_tab(page)
                with gr.Tab("What if", id="whatif"):
                    page.whatif = ui_whatif.layout()
    _api_inputs(page)
    return page


def _wire_controls(page: Page) -> None:
    """Strategy choice shows only its controls; chat controls follow the model."""
    for dropdown, panel, summary in ((page.strategy, page.panel, page.summary),
                                     (page.compare_strategy, page.compare_panel, page.compare_summary)):
        dropdown.change(lambda s, panel=panel: [*panel.visibility(s), strategy_summary(s)], dropdown,
                        [*panel.groups.values(), summary], **QUIET)
    page.model.change(lambda m, c: [gr.update(visible=is_chat_model(m)), gr.update(visible=is_chat_model(m) and c)],
                      [page.model, page.chat], [page.chat, page.system], **QUIET)
    page.chat.change(lambda m, c: gr.update(visible=is_chat_model(m) and c), [page.model, page.chat], page.system,
                     **QUIET)
    # a person picking another model gets a prompt that model can take (a share link keeps its own)
    page.model.input(prompt_for_model, [page.model, page.prompt], page.prompt, **QUIET)
    # a branch's forced tokens belong to its prompt, model and strategy: a person changing one starts afresh
    for control in (page.model, page.prompt, page.strategy):
        control.input(lambda: "", None, page.forced, **QUIET)


def _wire_explore(page: Page, store: ModelStore, decode: Decoder, compare_event: Any) -> None:
    """Generate (streamed), Stop (which also ends a compare run), and step selection by slider,
    token click or overview click."""
    main = page.main
    outputs = [main.status, *main.views[:1], page.step, *main.views[1:], *page.view_plots, page.view_html,
               page.trace, page.trace_file, page.png_files, page.seed]

    def run_explore(*values: Any, progress: Any = None) -> Iterator[list[Any]]:
        cfg, seed_update, theme = run_config(page, values)
        dtype = cfg.pop("dtype")
        forced = parse_path(cfg.pop("forced", ""))
        yield from stream_frames(generate(store, cfg["model"], cfg["strategy"], cfg["prompt"], cfg["params"],
                                          cfg["seed"], cfg["max_new_tokens"], cfg["system"],
                                          chat_flag(cfg["model"], cfg["chat"]), progress=events.progress(progress),
                                          decoder=decode, dtype=dtype, forced=forced,
                                          final_step=max(forced) if forced else "uncertain"), theme, seed_update)

    def stream_frames(frames: Iterator[Frame], theme: str, seed_update: Any = None) -> Iterator[list[Any]]:
        """generate's frames as ``outputs`` (a run's seed update goes out with its first frame)."""
        seed_update = gr.skip() if seed_update is None else seed_update
        for k, frame in enumerate(frames):
            n = len(frame.trace.get("steps") or [])
            status, text, *figs = main.frame_updates(frame, theme)
            # the download is cleared on the first token (it belonged to the previous run), filled at the end
            download = write_trace_json(frame.trace) if frame.final else (None if k == 0 else gr.skip())
            first = k == 0  # the previous run's PNGs go with its download
            yield [status, text, gr.update(maximum=max(1, n - 1), value=frame.step or 0), *figs,
                   *_view_updates(frame.views, theme), frame.trace, download, None if first else gr.skip(),
                   seed_update if first else gr.skip()]

    def on_stopped(trace: dict[str, Any] | None, a: dict[str, Any] | None, b: dict[str, Any] | None,
                   model: str, chat: Any, theme: str) -> list[Any]:
        """After Stop: every partial run (Explore's, or both Compare sides) is final, drawn at its last step."""
        show = _show_prompt(model, chat)
        download = write_trace_json(stopped(trace)) if trace and trace.get("steps") else gr.skip()
        return [*main.stopped_updates(trace, show, theme), download,
                *page.sides["a"].stopped_updates(a, show, theme), *page.sides["b"].stopped_updates(b, show, theme)]

    def on_token_click(trace: dict[str, Any] | None, model: str, chat: Any, theme: str,
                       evt: gr.EventData) -> list[Any]:
        k = charts.clamp_step(trace, event_data(evt).get("step", 0))
        if k is None:
            return [gr.skip()] * (5 + VIEW_PLOTS + 1)
        return [gr.update(value=k), *main.select_updates(trace, k, _show_prompt(model, chat), theme),
                *_step_view_updates(trace, k, theme)]

    def show_trace(trace: dict[str, Any], k: Any, model: str, chat: Any, theme: str) -> list[Any]:
        """A stored (finished) trace drawn into the Explore views at step ``k``."""
        k = charts.clamp_step(trace, k) or 0
        text, dist, water, over = main.select_updates(trace, k, _show_prompt(model, chat), theme)
        n = len(trace.get("steps") or [])
        return [status_html(trace, final=True), text, gr.update(maximum=max(1, n - 1), value=k), dist, water, over,
                *_step_view_updates(trace, k, theme), trace, write_trace_json(trace)]

    def on_step(trace: dict[str, Any] | None, k: Any, model: str, chat: Any, theme: str) -> list[Any]:
        return [*main.select_updates(trace, k, _show_prompt(model, chat), theme),
                *_step_view_updates(trace, k, theme)]

    event = gr.on([page.generate.click, page.prompt.submit], handler(run_explore, len(page.run_inputs), True),
                  page.run_inputs, outputs, api_name="explore", api_visibility="undocumented",
                  show_progress="full", show_progress_on=[main.text], **MODEL_EVENT)
    panel = page.branches
    event.success(ui_branches.on_run, [page.trace, panel.state],
                  [panel.tree, panel.view, panel.state, panel.forced], **QUIET)
    show_outputs = [main.status, main.text, page.step, main.dist, main.water, main.over, *page.view_plots,
                    page.view_html, page.trace, page.trace_file]
    branch_events = ui_branches.wire(page, panel, store, decode, stream_frames, outputs, show_trace, show_outputs)
    step_views = [*page.view_plots, page.view_html]
    page.step.input(on_step, [page.trace, page.step, page.model, page.chat, page.theme], [*main.views, *step_views],
                    trigger_mode="always_last", **QUIET)
    # a click while the last one is still drawing is not dropped: the latest click wins
    main.text.click(on_token_click, [page.trace, page.model, page.chat, page.theme], [page.step, *main.views, *step_views],
                    trigger_mode="always_last", **QUIET)
    page.png.click(handler(lambda trace, k, theme: iter([export_pngs(trace, k, theme)]), 3),
                   [page.trace, page.step, page.theme],
                   page.png_files, api_visibility="private")
    # Stop cancels between two steps (the engine yields after every token), then settles the page
    side_views = [c for key in ("a", "b") for c in (page.sides[key].status, *page.sides[key].views)]
    page.stop.click(None, None, None, cancels=[event, compare_event, *branch_events], api_visibility="private").then(
        on_stopped, [page.trace, page.traces["a"], page.traces["b"], page.model, page.chat, page.theme],
        [main.status, *main.views, page.trace_file, *side_views], **QUIET)


def _wire_compare(page: Page, store: ModelStore, decode: Decoder) -> Any:
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
                              progress=events.progress(progress), decoder=decode, dtype=dtype)):
            n = max(len((f.trace.get("steps") if f else None) or []) for f in (fa, fb))
            done = all(f is None or f.final for f in (fa, fb))
            views = [u for side, f in zip(sides, (fa, fb))
                     for u in (_view_updates(f.views if f else None, theme, COMPARE_VIEW_PLOTS))]
            yield [*sides[0].frame_updates(fa, theme), *sides[1].frame_updates(fb, theme), *views,
                   gr.update(maximum=max(1, n - 1), value=0 if done else max(n - 1, 0)),
                   fa.trace if fa else gr.skip(), fb.trace if fb else gr.skip(), seed_update if k == 0 else gr.skip()]

    def on_select(a: dict[str, Any] | None, b: dict[str, Any] | None, k: Any, model: str, chat: Any,
                  theme: str) -> list[Any]:
        out: list[Any] = []
        for side, trace in zip(sides, (a, b)):
            out += [gr.skip(), *side.select_updates(trace, k, _show_prompt(model, chat), theme)]
        return out + [u for side, trace in zip(sides, (a, b)) for u in side.view_updates(trace, k, theme)]

    def on_click(a: dict[str, Any] | None, b: dict[str, Any] | None, model: str, chat: Any, theme: str,
                 evt: gr.EventData) -> list[Any]:
        k = int(event_data(evt).get("step", 0))
        return [gr.update(value=k), *on_select(a, b, k, model, chat, theme)]

    outputs = [*side_outputs, *view_outputs, page.compare_step, *states, page.seed]
    event = page.compare_run.click(handler(run_compare, len(page.run_inputs), True), page.run_inputs,
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


def _wire_share(page: Page, demo: gr.Blocks) -> None:
    """Copy link, restore on load (and re-run where the link says so), and the examples."""
    def on_share(*values: Any) -> Any:
        return gr.update(value=share_query(**page.split_config(values[:-1]), run=values[-1]), visible=True)

    def on_load(request: gr.Request) -> list[Any]:
        query = {k: v for k, v in (request.query_params if request is not None else {}).items()
                 if not k.startswith("__")}  # __theme and the like belong to gradio
        if not query:
            return [gr.skip()] * len(page.restore_outputs)
        cfg, warnings = restore(query)
        for w in warnings[:3]:
            gr.Warning(w)
        return page.apply_config(cfg)

    page.explore_tab.select(lambda: "generate", None, page.mode, **QUIET)
    page.compare_tab.select(lambda: "compare", None, page.mode, **QUIET)
    page.link.click(on_share, [*page.config_inputs, page.mode], page.link_box, **QUIET).then(
        None, page.link_box, page.link_box, js=COPY_JS, api_visibility="private")
    demo.load(None, None, page.theme, js=PAGE_JS, api_visibility="private")
    demo.load(on_load, None, page.restore_outputs, **QUIET).then(None, page.run_flag, None, js=RUN_JS,
                                                                 api_visibility="private")
    for button, ex in zip(page.example_buttons, examples()):
        button.click(lambda ex=ex: [*page.apply_config(ex.config), f"**{ex.label}**: {ex.note}"], None,
                     [*page.restore_outputs, page.example_note], **QUIET).then(
            None, page.run_flag, None, js=RUN_JS, api_visibility="private")


def _wire_api(page: Page, decode: Decoder) -> None:
    names = ("model", "strategy", "prompt", "params", "seed", "max_new_tokens", "system", "chat", "dtype")
    page.api_trigger.click(
        handler(lambda *a: api_generate_stream(decode, *a), len(page.api_in), names=names), page.api_in,
        page.api_out, api_name="generate", api_description="Run one decoding; streams (text, '') after every "
        "token, then (text, trace JSON). params is a JSON object of the strategy's parameters.", **MODEL_EVENT)
    gr.api(list_strategies, api_name="strategies", api_description="Every strategy and its parameters, as JSON.")


def build_demo(store: ModelStore, decoder: Decoder | None = None) -> gr.Blocks:
    """The whole page, wired to ``store``. Call ``demo.launch(**launch_kwargs())`` to serve it."""
    decode = decoder or default_decoder(store)
    with gr.Blocks(title="Decoding Playground", delete_cache=(3600, 3600)) as demo:
        page = _layout()
        _wire_controls(page)
        _wire_explore(page, store, decode, _wire_compare(page, store, decode))
        _wire_share(page, demo)
        _wire_api(page, decode)
        ui_whatif.wire(page, page.whatif, store)
    demo.queue(max_size=QUEUE_MAX)
    return demo


def serve(store: ModelStore, host: str = "127.0.0.1", port: int | None = None,
          decoder: Decoder | None = None) -> tuple[gr.Blocks, str]:
    """Build and launch the page without blocking (tests, screenshots); returns (demo, its URL)."""
    demo = build_demo(store, decoder)
    _, url, _ = demo.launch(server_name=host, server_port=port, prevent_thread_lock=True, quiet=True,
                            **launch_kwargs())
    return demo, url


def restore(query: dict[str, str]) -> tuple[share.Config, list[str]]:
    """A page address's query -> the configuration to show (and warnings for what was dropped)."""
    names = [s.name for s in strategies_in_order()]
    base = share.Config(model=DEFAULT_MODEL, strategy="sampling" if "sampling" in names else names[0],
                        prompt=DEFAULT_PROMPT)
    return share.decode(query, base)


def _show_prompt(model: str, chat: Any) -> bool:
    """The prompt is shown before the text when the model continues it (no chat template); toy
    prompts are token numbers, not text, so they are not."""
    try:
        spec = spec_for(model)
    except InvalidRequest:
        return False
    return not spec.numeric_prompt and (chat is False or not spec.chat)


def _step_view_updates(trace: dict[str, Any] | None, step: Any, theme: str, plots: int = VIEW_PLOTS) -> list[Any]:
    """The strategy views redrawn for a newly selected step (a per-step view follows the slider)."""
    k = charts.clamp_step(trace, step)
    return _view_updates(strategy_views(trace, k) if trace and k is not None else None, theme, plots)


def _view_updates(views: list[View] | None, theme: str, plots: int = VIEW_PLOTS) -> list[Any]:
    """Fill ``plots`` figure slots and one HTML slot from what the trace carries; hide the unused ones."""
    if views is None:
        return [gr.skip()] * (plots + 1)
    figs = [v for v in views if v.figure is not None][:plots]
    html_parts = [f'<div class="pg-view"><h3>{_esc(v.title)}</h3>{v.html}</div>' for v in views if v.html]
    out: list[Any] = [gr.update(value=plot_value(v.figure, theme), label=v.title, visible=True) for v in figs]
    out += [gr.update(visible=False)] * (plots - len(figs))
    out.append(gr.update(value="".join(html_parts), visible=bool(html_parts)))
    return out
