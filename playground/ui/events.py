"""What every tab's wiring shares: event settings, the handler wrapper that turns a refused input
into a toast, updates keyed by component, the payload of the page's own JS events, and figures as
gr.Plot payloads.

The lowest file of the ui room: it imports no other ui module.
"""
from __future__ import annotations

import contextvars
import inspect
import json
import logging
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import gradio as gr
import plotly.graph_objects as go
from gradio.components.plot import PlotData

from playground.charts.common import escape
from playground.charts.theme import themed
from playground.errors import InvalidRequest
from playground.models import spec_for

if TYPE_CHECKING:
    from playground.models import Progress

MODEL_CONCURRENCY = "model"  # every event that runs a model shares this group (limit 1)
QUIET: dict[str, Any] = dict(api_visibility="private", show_progress="hidden")  # UI plumbing: no API, no spinner
MODEL_EVENT: dict[str, Any] = dict(concurrency_id=MODEL_CONCURRENCY, concurrency_limit=1)  # one model run at a time

# plotly's toolbar shows on hover over the chart's top right, where a title runs: of its nine buttons (some
# 230 px, over the title of a Compare side's chart) it keeps the camera and reset; a drag still zooms, a
# double click resets
PLOT_CONFIG = {"displaylogo": False, "responsive": True,
               "modeBarButtonsToRemove": ["zoom2d", "pan2d", "select2d", "lasso2d", "zoomIn2d", "zoomOut2d",
                                          "autoScale2d"],
               "toImageButtonOptions": {"format": "png", "scale": 2, "filename": "decoding-playground"}}


def no_progress_targets(demo: gr.Blocks) -> None:
    """An event that shows no progress (``show_progress="hidden"``) gets no progress targets either.

    Gradio's page keeps a loading status for every target of every event that has run (an event's
    targets are its outputs unless ``show_progress_on`` names others), and after each status message of
    any event it writes every one of them back, finding each component by a walk of the page's tree.
    Restoring a link or an example writes some 350 controls, and the page has some 600 components, so
    without this the browser spends most of a page load and a run walking the tree (4.1 of 7.0 s of a
    toy beam link's main thread, in Chromium's profiler). An empty list keeps the outputs as they are
    and the loading status empty. Nothing waits on a loading status: a run clicked while another
    event's outputs are on their way reads the controls as they are (hence the run buttons' gate)."""
    for fn in demo.fns.values():
        if fn.show_progress == "hidden" and fn.show_progress_on is None:
            fn.show_progress_on = []


# A run started: its output comes into view where it starts off screen (below the fold at 1440x900, some
# 1,700 px under Generate on a phone), so the person who clicked sees the first token arrive.
SHOW_OUTPUT_JS = """() => {
  const el = document.getElementById('%s');
  if (!el || document.body.classList.contains('pg-slides')) return [];
  const top = el.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight * 0.6) window.scrollTo({top: window.scrollY + top - 8});
  return [];
}"""

LOG = logging.getLogger("playground")
STOP_WAIT_SECONDS = 15.0  # how long Stop waits for the run to send its last frame before the page settles
IDLE_SECONDS = 2.0  # a stopped run nobody has advanced for this long was dropped by its cancel: Stop waits no more


class Run:
    """One handler run of a browser session: ``stop`` is set by the page's Stop, ``done`` when it ended."""

    def __init__(self) -> None:
        self.stop, self.done = threading.Event(), threading.Event()
        self._wakes: list[threading.Event] = []
        self.advancing = False  # the handler is making a frame (between two, Gradio holds the run)
        self.touched = time.perf_counter()  # when a frame was last begun or ended

    def advance(self, going: bool) -> None:
        """The handler begins (True) or ends (False) making a frame."""
        self.advancing, self.touched = going, time.perf_counter()

    def idle_for(self) -> float:
        """Seconds since a frame was last made, 0 while one is being made."""
        return 0.0 if self.advancing else time.perf_counter() - self.touched

    def wakes(self, event: threading.Event) -> None:
        """``event`` is set too when Stop comes (a wait for a step wakes at once, without polling)."""
        self._wakes.append(event)

    def request_stop(self) -> None:
        self.stop.set()
        for event in list(self._wakes):
            event.set()


class Runs:
    """The run each browser session has going (one at a time: every model event shares one group).
    Stop sets the run's flag; the handler reads it between two frames, so the run ends after the step
    in flight, with its own last frame, instead of being cut wherever a cancel lands."""

    def __init__(self) -> None:
        self._lock, self._runs = threading.Lock(), {}  # type: ignore[var-annotated]

    def begin(self, session: str) -> Run:
        run = Run()
        with self._lock:
            self._runs[session] = run
        return run

    def end(self, session: str, run: Run) -> None:
        with self._lock:
            if self._runs.get(session) is run:
                del self._runs[session]
        run.done.set()  # after: a run seen done is no longer the session's

    def stop(self, session: str, wait_s: float = 0.0, idle_s: float = IDLE_SECONDS) -> bool:
        """Ask ``session``'s run to stop; wait up to ``wait_s`` for it to end. False when none is going.

        The wait also ends once nobody has advanced the run for ``idle_s``: Stop cancels the page's
        events too, and a cancel that lands between two frames leaves the handler where it is, never
        resumed (so never ended) until it is collected; its last frame will not come. The page then
        settles on the frames it has instead of waiting out ``wait_s``."""
        with self._lock:
            run = self._runs.get(session)
        if run is None:
            return False
        run.request_stop()
        deadline = time.perf_counter() + wait_s
        while not run.done.wait(min(0.05, max(0.0, deadline - time.perf_counter()))):
            if time.perf_counter() >= deadline or run.idle_for() >= idle_s:
                break
        return True


RUNS = Runs()
_CURRENT: contextvars.ContextVar[Run | None] = contextvars.ContextVar("playground_run", default=None)


@contextmanager
def current_run(run: Run | None) -> Iterator[None]:
    """``run`` as the one ``stop_requested`` reads while the handler's generator advances one frame."""
    token = _CURRENT.set(run)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current() -> Run | None:
    """The page run this code is advancing (None outside a page run)."""
    return _CURRENT.get()


def stop_requested() -> bool:
    """Whether the page's Stop was clicked for the run this code is advancing (False outside a page run)."""
    run = _CURRENT.get()
    return run is not None and run.stop.is_set()


def request_stop(request: gr.Request) -> None:
    """The Stop button: the session's run ends after its current step, and this returns once it sent its
    last frame (or after STOP_WAIT_SECONDS), so what runs next on the page sees the final state."""
    session = getattr(request, "session_hash", None)
    if session:
        RUNS.stop(session, STOP_WAIT_SECONDS)


def refusal(err: InvalidRequest) -> gr.Error:
    """A refused input as the toast a person reads: escaped (Gradio renders the message as HTML, and
    messages quote model text such as ``<eos>``), logged as one line, no traceback (a traceback is
    for a real fault, not for a value out of range)."""
    LOG.warning("refused: %s", err)
    return gr.Error(escape(err), title="Not run", print_exception=False)


def refusal_html(err: InvalidRequest | str) -> str:
    """A refused input as the status line shows it until the next run: "Not run:" and the message."""
    return (f'<div class="pg-status pg-refused" role="alert" style="color: var(--error-text-color, #b91c1c)">'
            f"<b>Not run:</b> {escape(err)}</div>")


def handler(fn: Callable[..., Iterator[Any]], n_inputs: int, progress: bool = False,
            names: Sequence[str] = (), status: Any = None) -> Callable[..., Any]:
    """``fn(*values[, progress=...])`` as a Gradio handler taking ``n_inputs`` positional values (and a
    gr.Progress where asked); validation errors become gr.Error, a toast with the message, and the
    app stays ready for the next request. With ``status`` (one of the event's outputs), the message is
    also written there, where it stays after the toast fades, until the next run writes its own."""
    def wrapped(*args: Any) -> Iterator[Any]:
        values, extra = args[:n_inputs], list(args[n_inputs:])
        request = extra.pop() if extra and isinstance(extra[-1], gr.Request) else None
        kwargs = {"progress": extra[0]} if progress and extra else {}
        session = getattr(request, "session_hash", None)
        run = RUNS.begin(session) if session else None
        frames = None
        try:
            frames = fn(*values, **kwargs)
            while True:  # each frame is made with this run current, so the handler can read its Stop
                with current_run(run):
                    try:
                        if run is not None:
                            run.advance(True)
                        frame = next(frames)
                    except StopIteration:
                        return
                    finally:
                        if run is not None:
                            run.advance(False)
                yield frame
        except InvalidRequest as err:
            if status is not None:
                yield {status: refusal_html(err)}  # Gradio takes a dict of some of the outputs
            raise refusal(err) from None
        finally:
            if frames is not None and hasattr(frames, "close"):
                frames.close()  # a cancelled or dropped run ends its decoder now, between two steps
            if run is not None:
                assert session  # a run begins only for a session
                RUNS.end(session, run)

    names = list(names) or [f"value{i}" for i in range(n_inputs)]  # the API's parameter names
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    if progress:  # Gradio injects a tracker into a positional parameter whose default is gr.Progress()
        params.append(inspect.Parameter("progress", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=gr.Progress()))
    # and the request (its session, which Stop names) into one annotated gr.Request; not an API input
    params.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                    annotation=gr.Request))
    wrapped.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapped.__annotations__ = {"request": gr.Request}
    wrapped.__name__ = getattr(fn, "__name__", "handler")
    return wrapped


Updates = dict[Any, Any]  # {component: its new value or gr.update}: what a page handler returns, by name, not by place


class Unsent:
    """One streamed run's filter of its updates: a component whose new value equals the one this run last
    sent it is left out (a figure whose data did not change since the last redraw, a hidden slot hidden
    again), so the page neither receives nor redraws it. A gr.State is always kept: it never reaches the
    page, and comparing a growing trace would cost more than keeping it."""

    def __init__(self) -> None:
        self._sent: dict[int, Any] = {}

    def __call__(self, updates: Mapping[Any, Any]) -> dict[Any, Any]:
        out = {}
        for component, value in updates.items():
            if not isinstance(component, gr.State):
                key = id(component)
                if key in self._sent and self._sent[key] == value:
                    continue
                self._sent[key] = value
            out[component] = value
        return out


def keyed(updates: Mapping[Any, Any]) -> Any:
    """``updates`` ({component: value}) as a handler's return value. Gradio writes each value into its
    component and leaves the event's other outputs as they are; an empty mapping skips them all (Gradio
    would read an empty dict as one value)."""
    return dict(updates) if updates else gr.skip()


def progress(tracker: Any) -> Progress | None:
    """A gr.Progress as the (fraction, message) callback the model store reports loading to."""
    if tracker is None:
        return None
    return lambda fraction, message: tracker(fraction, desc=message)


def is_chat_model(model: str) -> bool:
    try:
        return spec_for(model).chat
    except InvalidRequest:
        return False


def chat_flag(model: str, chat: Any) -> bool | None:
    """The chat checkbox as a Request's ``chat``: None (no template to apply) for a model without one."""
    return bool(chat) if is_chat_model(model) else None


def event_data(evt: gr.EventData) -> dict[str, Any]:
    """The payload of the page's own JS events (``trigger('click', {step: ...})``: a token, an overview
    bar, a distribution bar), ``{}`` when there is none. Gradio 6 keeps it in ``EventData._data`` with
    no public accessor: its ``__getattr__`` reads single keys but fails when the payload is None (a
    trigger without detail), so the private attribute is read here, and only here."""
    return getattr(evt, "_data", None) or {}


def text_js(group: str) -> str:
    """js_on_load of a text panel: a click on a token, or a click on the group's overview chart
    (forwarded by assets/playground.js as a window event), selects that step."""
    return ("element.addEventListener('click', (e) => {"
            "  const t = e.target.closest('[data-step]');"
            "  if (t) trigger('click', {step: Number(t.dataset.step)});"
            "});"
            f"window.addEventListener('pg-select-{group}', (e) => trigger('click', {{step: e.detail}}));")


def plot_value(fig: go.Figure | None, theme: str | None = None) -> Any:
    """A figure as gr.Plot's payload, in the page's ``theme``, with plotly's config attached, so the
    modebar's camera button saves a 2x PNG with a useful name (gr.Plot sends the figure alone; its
    payload passes through)."""
    if fig is None:
        return None
    payload = json.loads(themed(fig, theme).to_json())
    payload["config"] = PLOT_CONFIG
    return PlotData(type="plotly", plot=json.dumps(payload))


def plot_component(value: go.Figure | None = None, **kwargs: Any) -> gr.Plot:
    return gr.Plot(plot_value(value), **kwargs)
