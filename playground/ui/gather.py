"""Events whose many controls reach the server as one value, gathered in the browser.

A run reads some 320 controls (every sampler stage's sliders). Gradio's page gives each input of an
event that went through its queue a loading status once the event ends, and keeps it: after every
later status message of any event it writes each of them back, finding each component by a walk of
the page's tree of some 600 components. After one run, so every frame of every later run cost some 320
walks in the browser. Here a first, browser-only event writes the controls' values into one hidden
box as JSON, and the server's event reads that box: its one input is all the page keeps a status for.
The server reads the values back through each component's own ``preprocess``, as Gradio would have.

Like events.py, this file imports no other ui module.
"""
from __future__ import annotations

import inspect
import json
import typing
from typing import Any, Callable, Sequence

import gradio as gr

GATHER_JS = "(...values) => JSON.stringify(values)"
# what the browser can gather: a control whose value is its plain JSON payload (a State stays on the server)
GATHERED_TYPES = (gr.Slider, gr.Number, gr.Textbox, gr.Dropdown, gr.Checkbox)


def on(triggers: Sequence[Any], fn: Callable[..., Any], inputs: Sequence[Any], outputs: Any, **kwargs: Any) -> Any:
    """``gr.on(triggers, fn, inputs, outputs, **kwargs)``, with the browser's controls among ``inputs``
    gathered first into a hidden box of this event's own (a State among them is passed as itself).
    Call it inside the page's Blocks. Returns the server's event (for ``cancels`` and ``.success``)."""
    gathered = [c for c in inputs if not isinstance(c, gr.State)]
    for c in gathered:
        if not isinstance(c, GATHERED_TYPES):
            raise TypeError(f"{type(c).__name__} cannot be gathered in the browser (allowed: "
                            f"{', '.join(t.__name__ for t in GATHERED_TYPES)}, gr.State)")
    states = [c for c in inputs if isinstance(c, gr.State)]
    into = gr.Textbox(visible=False)
    first = gr.on(list(triggers), None, gathered, into, js=GATHER_JS, queue=False, show_progress="hidden",
                  show_progress_on=[], api_visibility="private")
    return first.then(spread(fn, inputs), [into, *states], outputs, **kwargs)


def values(payload: Any, components: Sequence[gr.components.Component]) -> list[Any]:
    """The gathered JSON ``payload`` as each component's handler value (its ``preprocess``)."""
    try:
        raw = json.loads(payload or "null")
    except (TypeError, ValueError):
        raw = None
    if not isinstance(raw, list) or len(raw) != len(components):
        got = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise gr.Error(f"The page's settings came as {got} values, not the {len(components)} expected: "
                       "reload the page.", title="Not run", print_exception=False)
    return [c.preprocess(v) for c, v in zip(components, raw)]


def spread(fn: Callable[..., Any], inputs: Sequence[Any]) -> Callable[..., Any]:
    """``fn`` (taking ``inputs``' values in order, then what Gradio injects: progress, the request) as a
    handler taking the gathered box, then ``inputs``' States."""
    gathered = [c for c in inputs if not isinstance(c, gr.State)]
    n_states = len(inputs) - len(gathered)
    params = list(inspect.signature(fn).parameters.values())
    extra = params[len(inputs):]  # what Gradio injects by signature: a gr.Progress default, a gr.Request

    def merged(args: Sequence[Any]) -> list[Any]:
        given, states = iter(values(args[0], gathered)), iter(args[1:1 + n_states])
        return [next(states) if isinstance(c, gr.State) else next(given) for c in inputs] + list(args[1 + n_states:])

    if inspect.isgeneratorfunction(fn):
        def call(*args: Any, **kwargs: Any) -> Any:
            yield from fn(*merged(args), **kwargs)
    else:
        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*merged(args), **kwargs)
    names = ["settings", *(f"state{i}" for i in range(n_states))]
    head = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    call.__signature__ = inspect.Signature(head + extra)  # type: ignore[attr-defined]
    try:  # resolved here: Gradio reads them (the gr.Request) in this module's namespace, not fn's
        call.__annotations__ = typing.get_type_hints(fn)
    except (NameError, TypeError):
        call.__annotations__ = dict(getattr(fn, "__annotations__", {}))
    call.__name__ = getattr(fn, "__name__", "call")
    call.inputs = tuple(inputs)  # type: ignore[attr-defined]  # what the page's event gathers, in fn's order
    return call
