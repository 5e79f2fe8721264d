"""The handlers: plain functions, primitives in, text and figures out, callable from tests without a
browser. ``generate`` streams one run as Frames, ``compare`` two side by side, ``select_step``
redraws a step, ``restore`` reads a share link.

Serving: the engine caps prompt length and ``max_new_tokens`` for API callers too, and each run's
time (and beam rows x tokens) by the budget read from the environment at start
(``playground.serving.budget``).
"""
from __future__ import annotations

# ZeroGPU on Hugging Face Spaces: `spaces` must be imported before torch initialises CUDA, so this
# block comes before every other import, and page.py imports this module before anything imports torch.
try:
    import spaces
except ImportError:
    spaces = None

import dataclasses
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, cast

from playground.charts.common import counted, escape
from playground.charts.loops import span_text
from playground.charts.overview import most_uncertain_step, overview_figure
from playground.charts.phases import phase_line
from playground.charts.steps import StepCharts, clamp_step, empty_figure, step_figures
from playground.charts.text import token_html
from playground.charts.views import strategy_views
from playground.engine import READING_REASON, Request
from playground.engine import stream as engine_stream
from playground.errors import InvalidRequest
from playground.models import DEFAULT_MODEL, on_space, spec_for
from playground.models.fast.check import describe_record
from playground.serving import memory, zerogpu
from playground.serving.budget import FINISH_REASON as OUT_OF_TIME
from playground.serving.budget import Budget, stopped_text
from playground.trace import Trace
from playground.ui import share
from playground.ui.controls import strategies_in_order
from playground.ui.events import current as current_run
from playground.ui.events import stop_requested
from playground.ui.pull import Pull
from strategies.loops import LOOP_REASON
from strategies.sampling.grammar import DEAD_END_REASON, GRAMMAR_REASON, LIMIT_REASON
from strategies.speculative.baseline import STOPPED as NOT_TIMED_STOPPED

if TYPE_CHECKING:
    from playground.charts.common import View
    from playground.models import ModelStore, Progress

REFRESH_SECONDS = 0.8  # charts are re-sent whole: redraw at most this often while streaming
TEXT_SECONDS = 0.25  # the text at most four times a second: a page never queues more frames than it can draw
DEFAULT_PROMPT = share.DEFAULT_PROMPT
NUMERIC_PROMPT = "1 2"  # the toy models' own example: token ids, "once upon"

Decoder = Callable[[Request, "Progress | None"], Iterator[Trace]]


@dataclass
class Frame:
    """What the page shows after one more token. ``figures`` / ``views`` are None between redraws."""

    trace: dict[str, Any]
    html: str
    status: str
    step: int | None
    figures: StepCharts | None
    views: list[View] | None
    final: bool


class _TraceDicts:
    """Trace -> its JSON dict during streaming, converting each step once (the full to_dict grows
    with the run and would make every token slower than the last)."""

    def __init__(self) -> None:
        self._steps: dict[int, tuple[Any, dict[str, Any]]] = {}

    def __call__(self, trace: Trace) -> dict[str, Any]:
        # copied, not shared: the strategy appends to its rounds and beam tree in place, and a frame's dict
        # outlives the step it was made at (Stop during a step ends the run on the last frame sent)
        d = _copied(dataclasses.replace(trace, steps=[]).to_dict())
        d["steps"] = [self._step(s) for s in trace.steps]
        return d

    def _step(self, step: Any) -> dict[str, Any]:
        hit = self._steps.get(id(step))
        if hit is None or hit[0] is not step:
            hit = (step, step.to_dict())
            self._steps[id(step)] = hit
        return hit[1]


def _copied(value: Any) -> Any:
    """``value`` with its dicts and lists copied all the way down (the rest is immutable)."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


@dataclass(frozen=True)
class Report:
    """What the run said it is doing between two tokens: a model loading, a baseline measured."""

    fraction: float
    message: str

    def doing(self) -> str:
        """As the status line says it: 'loading gemma3-270m… 40%'."""
        return f"{self.message}… {round(100 * min(max(self.fraction, 0.0), 1.0))}%"


class Heard:
    """The progress callback a run reports to (the model store's loading, a strategy's set-up steps):
    passed on to the page's progress bar, and the latest report kept for the status line, waking the
    handler that waits for the step (``wake``)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress, self.wake = progress, threading.Event()
        self._lock, self._latest = threading.Lock(), cast("Report | None", None)

    def __call__(self, fraction: float, message: str) -> None:
        if self.progress is not None:
            self.progress(fraction, message)
        with self._lock:
            self._latest = Report(fraction, message)
        self.wake.set()

    def take(self) -> Report | None:
        """The report not yet shown, once."""
        with self._lock:
            latest, self._latest = self._latest, None
        return latest


def status_html(trace: dict[str, Any], final: bool, note: str = "", doing: str = "") -> str:
    """One line under the text: model, strategy, chain, tokens, speed, why it stopped; ``doing``, where
    given, in place of 'generating…' (what a run does between two tokens: loading, measuring)."""
    timing = trace.get("timing") or {}
    chain = " → ".join(trace.get("chain") or []) or trace.get("strategy", "")
    steps = len(trace.get("steps") or [])
    state = {"eos": "finished at end-of-sequence", "length": "reached max new tokens",
             "stopped": f"stopped at step {steps - 1}" if steps else "stopped before the first step",
             GRAMMAR_REASON: "finished: the grammar is complete",
             DEAD_END_REASON: "stopped: the grammar allows no token here",
             OUT_OF_TIME: stopped_text(trace.get("time_budget_seconds")),
             LIMIT_REASON: f"stopped: {trace.get('grammar_limit') or 'the grammar reached a limit'}; the text so far stands",
             LOOP_REASON: loop_stopped_text(trace),
             }.get(trace.get("finish_reason", ""), "generating…")
    if final and state == "generating…" and trace.get("finish_reason") not in ("", "running", None):
        state = f"ended: {trace['finish_reason']}"  # a reason this line has no words for
    if not final and state != "generating…":
        state = "generating…"
    if trace.get("finish_reason") == READING_REASON:  # before the first token: the prompt's prefill
        n = (trace.get("extra") or {}).get("prompt_tokens", trace.get("prompt_tokens", 0))
        state = f"reading the prompt ({counted(int(n), 'token')})…"
        if trace.get("setup"):  # or a one-off set-up step of the strategy (the trace's extra, in its dict)
            state = f"{escape(trace['setup'])}…"
    if doing and not final:
        state = escape(doing)
    model = f"<b>{escape(trace.get('model', ''))}</b>" + (f" ({escape(trace['dtype'])})" if trace.get("dtype") else "")
    if trace.get("weights_check"):  # how the weights compared with float32 on this CPU, on hover
        model = f'<span class="pg-weights" title="{escape(describe_record(trace["weights_check"]))}">{model}</span>'
    gap = (trace.get("weights_check") or {}).get("one_pass_gap")
    if trace.get("strategy") == "speculative" and gap:  # lossless only up to this CPU's rounding: said, not hidden
        note = (f"can part from plain decoding at a near tie (one pass vs one token at a time: {gap:.2g} in a logit)"
                + (f" · {note}" if note else ""))
    phases = phase_line(trace)
    if phases:
        note = phases + (f" · {note}" if note else "")
    parts = [model, escape(trace.get("strategy", "")),
             f"chain: {escape(chain)}", f"seed {trace.get('seed', 0)}", counted(len(trace.get("tokens") or []), "token"),
             f"{timing.get('tokens_per_second', 0):.1f} tok/s", state + (f" · {escape(note)}" if note else "")]
    return '<div class="pg-status">' + " · ".join(parts) + "</div>"


def loop_stopped_text(trace: dict[str, Any]) -> str:
    """How a run that loop_stop ended is worded, from its last loop record: 'stopped: a loop of 2 tokens × 3
    at step 5 («·a·time»)'."""
    loops = trace.get("loops") or []
    if not loops:
        return "stopped: a loop"
    last = loops[-1]
    return (f"stopped: a loop of {counted(last['period'], 'token')} × {last['repeats']} at step {last['found_at']} "
            f"(«{span_text(last)}»)")


def default_decoder(store: ModelStore, budget: Budget | None = None) -> Decoder:
    """engine.stream on ``store`` within ``budget`` (default: read from the environment now);
    on a ZeroGPU Space the GPU work runs under ``spaces.GPU``."""
    budget = budget or Budget.from_env()

    def decode(req: Request, progress: Progress | None = None) -> Iterator[Trace]:
        try:
            yield from engine_stream(store, req, progress, budget, announce=True)
        finally:
            memory.trim()  # the run's buffers are free: their pages go back to the system

    if spaces is None or not on_space():
        return decode
    return GpuDecoder(store, budget)


def zero_gpu() -> bool:
    """Whether this process runs on ZeroGPU (the `spaces` package reads $SPACES_ZERO_GPU)."""
    return spaces is not None and bool(spaces.config.Config.zero_gpu)


def request_rows(req: Request) -> int:
    """Rows a step of ``req`` runs through the model (beams x prefixes); 1 where its params are refused."""
    try:
        return zerogpu.rows(req.row_factors())  # the params read once: the run reads the same ones
    except InvalidRequest:
        return 1  # the run itself refuses it with the message, well within the floor


class GpuDecoder:
    """engine.stream on a Space under ``spaces.GPU`` (a no-op off ZeroGPU), declaring the duration
    ``playground.serving.zerogpu`` sizes from the request; on ZeroGPU a run already made replays."""

    def __init__(self, store: ModelStore, budget: Budget) -> None:
        self.store, self.budget, self.per_token = store, budget, zerogpu.token_seconds()
        self.replays = zerogpu.Replays() if zero_gpu() else None
        self._on_gpu = spaces.GPU(duration=self.gpu_seconds)(self._stream)

    def gpu_seconds(self, req: Request) -> int:
        """The duration ``req`` declares (spaces.GPU calls this with the decorated function's inputs)."""
        return zerogpu.gpu_seconds(request_rows(req), req.max_new_tokens, self.per_token, self.budget.seconds)

    def note(self, req: Request) -> str:
        """The estimate for the page's status; empty off ZeroGPU."""
        if not zero_gpu():
            return ""
        return zerogpu.describe(self.gpu_seconds(req), request_rows(req), req.max_new_tokens)

    def _stream(self, req: Request) -> Iterator[Trace]:
        yield from engine_stream(self.store, req, None, self.budget, announce=True)  # the GPU worker cannot report to gr.Progress

    def __call__(self, req: Request, progress: Progress | None = None) -> Iterator[Trace]:
        if self.replays is None:
            yield from self._on_gpu(req)
            return
        key = zerogpu.replay_key(dataclasses.asdict(req))
        kept = self.replays.get(key)
        if kept is not None:
            yield kept
            return
        trace = None
        for trace in self._on_gpu(req):
            yield trace
        if trace is not None:
            self.replays.keep(key, trace, trace.finish_reason)


def generate(store: ModelStore, req: Request, *, progress: Progress | None = None, decoder: Decoder | None = None,
             compact: bool = False, final_step: str | int = "uncertain", refresh_seconds: float = REFRESH_SECONDS,
             text_seconds: float = TEXT_SECONDS) -> Iterator[Frame]:
    """Stream the run ``req`` as Frames: the text at most every ``text_seconds`` (tokens decoded faster
    than that go out together), charts every ``refresh_seconds``, and everything at the end.

    The first frame carries text only so the first token shows as early as possible; charts follow
    ``refresh_seconds`` later (so a run that ends sooner is drawn once). Stop is read after every
    token, sent or not, and while a step runs (the steps run on a thread of their own: ``playground.ui.pull``):
    Stop during a step that does not end within 0.2 s ends the run at once on the tokens last sent.
    ``final_step``: which step the last frame selects, "uncertain" (highest model entropy), "first",
    or a step number (a branch shows its forced step).
    ``compact``: charts for a half-width column (compare).
    ``decoder``: what runs ``req`` (default: ``default_decoder(store)``).
    Raises InvalidRequest (and its ModelUnavailable) with the validation message.
    """
    decode = decoder or default_decoder(store)
    note = decode.note(req) if isinstance(decode, GpuDecoder) else ""  # ZeroGPU's estimate, in the status
    heard = Heard(progress)  # the status line says what the run reports (a model loading) between tokens
    pull = Pull(decode(req, heard))
    try:
        yield from _frames(pull, heard, req, note, compact, final_step, refresh_seconds, text_seconds)
    finally:
        pull.close()


def _frames(pull: Pull[Trace], heard: Heard, req: Request, note: str, compact: bool, final_step: str | int,
            refresh_seconds: float, text_seconds: float) -> Iterator[Frame]:
    dicts, last_draw, draw_cost, last_text, trace = _TraceDicts(), 0.0, 0.0, 0.0, None
    with_prompt = show_prompt(req.model, req.chat)
    k, halted, sent = -1, False, None
    wake, run = heard.wake, current_run()
    if run is not None:
        run.wakes(wake)  # Stop ends the wait for a step at once
    for item in pull.steps(stop_requested, wake, news=heard.take):
        if isinstance(item, Report):  # a model loading, a baseline measured: the status says so
            yield _report_frame(item, req, sent, note, with_prompt)
            continue
        trace = item
        heard.take()  # a report from before this step is no longer news
        if trace.finish_reason == READING_REASON:  # the prompt is being read: say so, with its token count
            d = trace.to_dict()
            yield Frame(d, token_html(d, None, with_prompt), status_html(d, final=False, note=note), None,
                        None, None, final=False)
            continue
        k += 1
        now = time.perf_counter()
        if k == 0:
            last_draw = now  # the first token goes out alone; a quick run is drawn once, at its end
        # Redraw no more often than refresh_seconds, and at most an eighth of the time on the server (about
        # as much again in the browser): a drawing's cost is making its figures and the page's side holding
        # the frame (turning them into the page's payloads and sending them), so it grows with the run and
        # redraws thin out.
        redraw = k > 0 and now - last_draw >= max(refresh_seconds, 7 * draw_cost) and not stop_requested()
        if k == 0 or redraw or now - last_text >= text_seconds:
            d = dicts(trace)
            step = len(d["steps"]) - 1 if d["steps"] else None
            figures = views = None
            if redraw and step is not None:
                figures = _figures(d, step, compact)
                views = strategy_views(d, step)
            elif redraw:  # no step yet (beam's steps are its best path, known at the end): its views grow
                views = strategy_views(d) or None
            if stop_requested():  # Stop came while drawing: the text goes now, the charts after the run
                figures = views = None
            last_text, sent = time.perf_counter(), d
            yield Frame(d, token_html(d, step, with_prompt), status_html(d, final=False, note=note), step,
                        figures, views, final=False)
            if figures is not None or views is not None:
                last_draw = time.perf_counter()
                draw_cost = last_draw - now
        if stop_requested() and trace.finish_reason == "running":  # Stop: this step was the last
            halted = True
            break
    yield from _last_frames(pull, trace, sent, halted, note, compact, final_step, with_prompt)


def _report_frame(report: Report, req: Request, sent: dict[str, Any] | None, note: str, with_prompt: bool) -> Frame:
    """The text last sent (the prompt before the first token) under a status that says what the run is doing."""
    d = sent or Trace(model=req.model, strategy=req.strategy, params=dict(req.params), seed=req.seed,
                      prompt=req.prompt, prompt_ids=[], finish_reason="running").to_dict()
    step = len(d["steps"]) - 1 if d["steps"] else None
    return Frame(d, token_html(d, step, with_prompt), status_html(d, final=False, note=note, doing=report.doing()),
                 step, None, None, final=False)


def _last_frames(pull: Pull[Trace], trace: Trace | None, sent: dict[str, Any] | None, halted: bool, note: str,
                 compact: bool, final_step: str | int, with_prompt: bool) -> Iterator[Frame]:
    """The run's final frame once ``pull`` has no more steps: the tokens last ``sent`` where Stop came while a
    step ran, the stopped run where Stop came between two (``halted``), else the finished run with its charts
    at ``final_step``."""
    if pull.interrupted:  # Stop while a step ran: the run ends on the tokens the page was last sent
        if sent is None:
            return
        full = stopped(sent)
        step = len(full["steps"]) - 1 if full["steps"] else None
        yield Frame(full, token_html(full, step, with_prompt), status_html(full, final=True, note=note), step,
                    None, None, final=True)
        return
    if halted:
        pull.close()  # the engine closes the strategy between two steps; the models are released
    if trace is None or trace.finish_reason == READING_REASON:
        return
    full = trace.to_dict()
    if halted:
        full = stopped(full)
        step = len(full["steps"]) - 1 if full["steps"] else None
        # the status and text alone (cheap), so the page says it stopped right away and Stop's wait ends:
        # the page's Stop redraws the charts at this step after it (explore.wire's on_stopped)
        yield Frame(full, token_html(full, step, with_prompt), status_html(full, final=True, note=note), step,
                    None, None, final=True)
        return
    step = _final_step(full, final_step)
    yield Frame(full, token_html(full, step, with_prompt), status_html(full, final=True, note=note), step,
                _figures(full, step, compact) if step is not None else None, strategy_views(full, step), final=True)


def _final_step(trace: dict[str, Any], final_step: str | int) -> int | None:
    if not trace["steps"]:
        return None
    if final_step == "uncertain":
        return most_uncertain_step(trace)
    return clamp_step(trace, 0 if final_step == "first" else final_step)


def _figures(trace: dict[str, Any], step: int | None, compact: bool = False) -> StepCharts:
    if step is None:
        empty = empty_figure("This run recorded no steps")
        return StepCharts(empty, empty, overview_figure(trace))
    return step_figures(trace, step, compact)


def select_step(trace: dict[str, Any] | None, step: Any, show_prompt: bool = False, compact: bool = False
                ) -> tuple[str, StepCharts] | None:
    """(text html, the step charts) with ``step`` selected; None without a trace."""
    k = clamp_step(trace, step)
    if trace is None or k is None:
        return None
    return token_html(trace, k, show_prompt), step_figures(trace, k, compact)


def compare(store: ModelStore, a: Request, b: Request, *, progress: Progress | None = None,
            refresh_seconds: float = REFRESH_SECONDS, decoder: Decoder | None = None
            ) -> Iterator[tuple[Frame | None, Frame | None]]:
    """Runs ``a`` and ``b`` (the page's: the same prompt, seed and grammar through two strategies), one
    token of each in turn, so both texts grow side by side. Both end on step 0, where the two saw the
    same context. Errors name the side."""
    requests = {"A": a, "B": b}
    runs = {side: generate(store, req, progress=progress, refresh_seconds=refresh_seconds, final_step="first",
                           decoder=decoder, compact=True)
            for side, req in requests.items()}
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
                raise side_refused(side, requests[side].strategy, err) from None
        yield last["A"], last["B"]


def side_refused(side: str, strategy: str, err: InvalidRequest) -> InvalidRequest:
    """A Compare side's refusal, naming the side and its strategy: "A (beam): ..."."""
    return InvalidRequest(f"{side} ({strategy}): {err}")


def stopped(trace: dict[str, Any]) -> dict[str, Any]:
    """A trace whose run was cancelled mid-way says so (a speculative one also why it has no plain
    reference: the run records it when Stop closes it, after the page got its last frame); a run that
    had already ended keeps its reason."""
    if trace.get("finish_reason") in ("", "running", None):
        out = dict(trace, finish_reason="stopped")
        speed = (trace.get("timing") or {}).get("speculative")
        if speed is not None and not speed.get("baseline") and not speed.get("no_baseline"):
            out["timing"] = {**trace["timing"], "speculative": {**speed, "no_baseline": NOT_TIMED_STOPPED}}
        return out
    return trace


def restore(query: dict[str, str]) -> tuple[share.Config, list[str]]:
    """A page address's query -> the configuration to show (and warnings for what was dropped)."""
    names = [s.name for s in strategies_in_order()]
    base = dataclasses.replace(share.defaults(), model=DEFAULT_MODEL,
                               strategy=share.DEFAULT_STRATEGY if share.DEFAULT_STRATEGY in names else names[0])
    return share.decode(query, base)


def prompt_for_model(model: str, prompt: str) -> str:
    """Keep ``prompt`` when ``model`` can take it; otherwise that kind of model's example prompt.
    Toy models read token numbers (and their few words); text models read text."""
    try:
        spec = spec_for(model)
    except InvalidRequest:
        return prompt
    if spec.prompt_form:  # a toy of one task (toy-think: 'a + b ='): its form, else its example
        return prompt if re.fullmatch(spec.prompt_form, prompt.strip()) else spec.example_prompt
    numeric = spec.numeric_prompt
    is_numbers = bool(prompt.split()) and all(part.isdigit() for part in prompt.split())
    if numeric and not is_numbers:
        return NUMERIC_PROMPT
    if not numeric and is_numbers:
        return DEFAULT_PROMPT
    return prompt


def show_prompt(model: str, chat: Any) -> bool:
    """The prompt is shown before the text when the model continues it (no chat template); toy
    prompts are token numbers, not text, so they are not."""
    try:
        spec = spec_for(model)
    except InvalidRequest:
        return False
    return not spec.numeric_prompt and (chat is False or not spec.chat)
