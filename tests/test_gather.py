"""Events whose controls are gathered in the browser (playground/ui/gather.py), and the built page's events
(what each leaves for Gradio's page to track: its progress targets and its browser-side inputs).

The browser side (GATHER_JS joining the values, then the server's event) runs in every browser test that
clicks Generate, Compare, Copy link, Sample many or Detect; tests/test_share_branches.py fires the page's
events the way the browser chains them, gathering included."""
from __future__ import annotations

import inspect
import json
import typing

import gradio as gr
import pytest

from playground.ui import gather
from playground.ui.page import build_demo

pytestmark = pytest.mark.filterwarnings("ignore:.*no_silent_downcasting")


def test_gathered_values_come_back_as_each_component_preprocesses_them():
    with gr.Blocks():
        whole = gr.Number(2.0, precision=0)
        exact = gr.Number(0.5)
        index = gr.Dropdown(["a", "b", "c"], value="a", type="index")
        flag = gr.Checkbox()
        text = gr.Textbox()
        slider = gr.Slider(0, 2, step=0.1)
    got = gather.values(json.dumps([3.0, 0.25, "c", True, "x y", 1.5]), [whole, exact, index, flag, text, slider])
    assert got == [3, 0.25, 2, True, "x y", 1.5]
    assert type(got[0]) is int  # precision 0 reads an int, as Gradio's own path does


@pytest.mark.parametrize("payload", [json.dumps([1]), json.dumps([1, 2, 3]), "{not json", None, json.dumps({"a": 1})])
def test_a_payload_that_is_not_the_gathered_values_is_refused_with_the_counts(payload):
    with gr.Blocks():
        comps = [gr.Number(), gr.Number()]
    with pytest.raises(gr.Error, match="not the 2 expected"):
        gather.values(payload, comps)


def test_spread_calls_the_handler_with_the_values_and_states_in_their_order_and_keeps_what_gradio_injects():
    with gr.Blocks():
        a, b = gr.Number(), gr.Textbox()
        state = gr.State()
    seen = []

    def fn(x, s, y, progress=gr.Progress(), request: gr.Request = None):  # noqa: B008 (Gradio's own idiom)
        seen.append((x, s, y, progress is not None, request))
        yield "frame"

    call = gather.spread(fn, [a, state, b])
    assert inspect.isgeneratorfunction(call)  # Gradio streams it as it streamed fn
    params = inspect.signature(call).parameters
    assert list(params) == ["settings", "state0", "progress", "request"]
    assert isinstance(params["progress"].default, gr.Progress)
    assert typing.get_type_hints(call)["request"] is gr.Request  # how Gradio finds where the request goes
    assert list(call(json.dumps([4, "t"]), {"k": 1}, None, "req")) == ["frame"]
    assert seen == [(4.0, {"k": 1}, "t", False, "req")]
    assert call.inputs == (a, state, b)

    plain = gather.spread(lambda x, y: f"{x}|{y}", [a, b])
    assert not inspect.isgeneratorfunction(plain) and plain(json.dumps([1.5, 2])) == "1.5|2"  # a Textbox reads str


def test_on_gathers_in_the_browser_without_the_queue_then_runs_the_handler_on_the_box_and_states():
    with gr.Blocks() as demo:
        a, b = gr.Slider(0, 1), gr.Dropdown(["x"], value="x")
        state, out = gr.State(), gr.Textbox()
        button = gr.Button()
        event = gather.on([button.click], lambda x, s, y: f"{x}{s}{y}", [a, state, b], out, api_visibility="private")
    fns = list(demo.fns.values())
    first = next(f for f in fns if f.js == gather.GATHER_JS)
    assert first.fn is None and first.inputs == [a, b] and not first.queue and first.show_progress_on == []
    box = first.outputs[0]
    assert isinstance(box, gr.Textbox) and not box.visible
    server = next(f for f in fns if f.trigger_after == first._id)
    assert server.fn is event.fn and server.inputs == [box, state] and server.outputs == [out]
    assert server.fn(json.dumps([0.5, "x"]), 7) == "0.57x"


def test_only_what_the_browser_holds_can_be_gathered():
    with gr.Blocks():
        button, out = gr.Button(), gr.Textbox()
        with pytest.raises(TypeError, match="File cannot be gathered"):
            gather.on([button.click], lambda f: f, [gr.File()], out)


@pytest.fixture(scope="module")
def page_fns(store):
    demo = build_demo(store)
    yield list(demo.fns.values())
    demo.close()


def test_no_server_event_of_the_page_reads_more_than_a_few_dozen_controls_from_the_browser(page_fns):
    """Gradio's page keeps a status for each input of an event that went through its queue, and walks
    its tree for each of them after every later status message: the run events read one gathered box."""
    wide = {f.name: len(f.inputs) for f in page_fns if f.fn is not None and len(f.inputs) > 12}
    assert wide == {}
    gathered = {f.fn.__name__ for f in page_fns if f.fn is not None and len(getattr(f.fn, "inputs", ())) > 300}
    assert {"run_explore", "run_compare", "on_share", "on_sample", "on_detect"} <= gathered


def test_an_event_that_shows_no_progress_has_no_progress_targets(page_fns):
    hidden = [f for f in page_fns if f.show_progress == "hidden"]
    assert len(hidden) > 50
    assert [f.name for f in hidden if f.show_progress_on != []] == []
    # the runs keep theirs: the text a run writes into
    explore = next(f for f in page_fns if f.api_name == "explore")
    assert [c.elem_id for c in explore.show_progress_on] == ["pg-text"]
