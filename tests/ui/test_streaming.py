"""How a run streams to the page: redraws that keep to a quarter of the time with what the page does with
a frame counted, beam's views while its search runs, a stopped run's last frame without charts, and
nothing sent twice."""
from __future__ import annotations

import threading
import time

import gradio as gr

from playground.charts.steps import empty_figure
from playground.engine import Request
from playground.ui import events
from playground.ui.events import Run, Unsent, current_run, plot_value
from playground.ui.handlers import default_decoder, generate
from playground.ui.pull import Pull

LONG = {i: 9 + i % 4 for i in range(30)}  # the toy's own first tokens, over and over: a 30-token run


def slowed(store, seconds: float):
    """The page's decoder, with each token taking ``seconds`` more (a slower machine's decoding)."""
    inner = default_decoder(store)

    def decode(req, progress=None):
        for trace in inner(req, progress):
            time.sleep(seconds)
            yield trace

    return decode


def test_redraws_count_what_the_page_does_with_a_frame_and_keep_to_a_quarter_of_the_time(store):
    """A consumer that takes 0.5 s over each frame with charts (turning figures into the page's payloads
    and sending them: many times the figures' own making) while a token takes 30 ms more: redraws thin out
    so that drawing stays near a quarter of the run, instead of following every token."""
    req = Request("toy", "sampling", "1 2", seed=0, max_new_tokens=30, forced=LONG)
    start, held, charts = time.perf_counter(), 0.0, 0
    for frame in generate(store, req, decoder=slowed(store, 0.03), refresh_seconds=0, text_seconds=0):
        if frame.figures is not None and not frame.final:
            charts += 1
            time.sleep(0.5)
            held += 0.5
    wall = time.perf_counter() - start
    assert charts >= 1  # it still redraws while streaming
    assert held / wall < 0.4, f"{charts} redraws held {held:.2f} s of {wall:.2f} s"


def test_beam_search_draws_its_tree_while_the_search_runs(store):
    """Beam's steps are its best path, known at the end; its tree grows with the search and is drawn as
    it grows, each redraw with the nodes the frame's trace holds."""
    req = Request("toy", "beam", "1 2", {"num_beams": 3}, seed=0, max_new_tokens=12)
    drawn_sizes, last = [], None
    for frame in generate(store, req, decoder=slowed(store, 0.02), refresh_seconds=0, text_seconds=0):
        last = frame  # each frame is read as it comes, as the page reads it
        if frame.final or not frame.views or frame.trace["finish_reason"] != "running":
            continue  # (the search's last trace, with its best path as steps, may go out before the final frame)
        assert frame.step is None and not frame.trace["steps"]
        tree = next(v for v in frame.views if v.title == "Beam tree")
        nodes = frame.trace["beam"]["nodes"]
        drawn = [i for t in tree.figure.data if (t.meta or {}).get("role") == "nodes" for i in t.customdata]
        assert sorted(drawn) == [n["id"] for n in nodes]  # every node the frame's trace holds, once
        drawn_sizes.append(len(drawn))
    assert drawn_sizes, "no view was drawn before the run ended"
    assert drawn_sizes == sorted(drawn_sizes) and drawn_sizes[0] < len(last.trace["beam"]["nodes"])


def test_a_stopped_run_ends_on_its_status_and_text_alone(store):
    """Stop: the step in flight is the last; the final frame says where it stopped and carries no charts
    (the page's Stop draws them after it), so Stop's wait ends as soon as the status is out."""
    run = Run()
    req = Request("toy", "sampling", "1 2", seed=0, max_new_tokens=40)
    frames, stream = [], generate(store, req, refresh_seconds=0, text_seconds=0)
    with current_run(run):
        for frame in stream:
            frames.append(frame)
            if len(frame.trace.get("tokens") or []) == 5:
                run.request_stop()
    last = frames[-1]
    assert last.final and last.figures is None and last.views is None
    assert len(last.trace["tokens"]) == 5 and last.trace["finish_reason"] == "stopped"
    assert "stopped at step 4" in last.status


def test_unsent_leaves_out_what_the_run_already_sent_but_always_keeps_state():
    with gr.Blocks():
        plot, html, state = gr.Plot(), gr.HTML(), gr.State()
    unsent = Unsent()
    fig = plot_value(empty_figure("a"), "light")
    first = unsent({plot: fig, html: "x", state: {"n": 1}})
    assert set(first) == {plot, html, state}
    again = unsent({plot: plot_value(empty_figure("a"), "light"), html: "y", state: {"n": 1}})
    assert set(again) == {html, state}  # the same figure is not sent twice; a State always goes
    changed = unsent({plot: plot_value(empty_figure("b"), "light"), html: "y"})
    assert set(changed) == {plot}
    assert events.Unsent()({plot: fig}) == {plot: fig}  # a new run starts with nothing sent


def test_stop_during_a_long_step_ends_the_run_at_once_on_the_tokens_last_sent(store):
    """A step that takes 3 s (a busy machine, a long prefill): Stop 0.3 s into it ends the run within a
    second on what the page was last sent; the interrupted step is not shown."""
    inner = default_decoder(store)

    def decode(req, progress=None):
        for trace in inner(req, progress):
            if len(trace.tokens) == 4:
                time.sleep(3.0)  # the fifth token's step, slow
            yield trace

    run = Run()
    req = Request("toy", "sampling", "1 2", seed=0, max_new_tokens=7)
    frames, clicked = [], []

    def click_stop():
        clicked.append(time.perf_counter())
        run.request_stop()

    with current_run(run):
        for frame in generate(store, req, decoder=decode, refresh_seconds=60, text_seconds=0):
            frames.append((time.perf_counter(), frame))
            if len(frame.trace.get("tokens") or []) == 3:
                threading.Timer(0.3, click_stop).start()
    last_time, last = frames[-1]
    assert last.final and "stopped at step 2" in last.status
    assert len(last.trace["tokens"]) == 3  # the tokens last sent; the interrupted step is not shown
    assert last_time - clicked[0] < 1.0, f"the stopped frame came {last_time - clicked[0]:.2f} s after Stop"


def test_pull_runs_every_step_on_one_thread_and_closes_the_source_after_an_interrupted_step():
    threads, closed = [], []

    def source():
        try:
            for i in range(3):
                threads.append(threading.get_ident())
                time.sleep(1.0 if i == 2 else 0)
                yield i
        finally:
            closed.append(time.perf_counter())

    pull = Pull(source())
    stop, wake, stop_at = threading.Event(), threading.Event(), [0.0]

    def click():
        stop_at[0] = time.perf_counter()
        stop.set()
        wake.set()

    got = []
    for item in pull.steps(stop.is_set, wake):
        got.append(item)
        if item == 1:
            threading.Timer(0.2, click).start()  # Stop 0.2 s into the third, 1 s step
    returned = time.perf_counter()
    assert got == [0, 1] and pull.interrupted
    assert returned - stop_at[0] < 0.45  # the wait ended with Stop and its 0.2 s grace, not with the step
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()
    pull.close()
    assert closed and closed[0] - stop_at[0] >= 0.7  # closed once the interrupted step had ended
    pull.close()  # a second close does nothing
    assert len(closed) == 1


def test_stop_waits_for_a_frame_being_made_but_not_for_a_run_its_cancel_dropped():
    """Stop's wait ends when the run ends; and, when the page's cancel dropped the handler between two
    frames (never resumed, so never ended), once nobody has advanced it for ``idle_s``, instead of the
    whole ``wait_s``."""
    def frames():
        while True:
            for _ in range(20):  # a frame takes 0.5 s; Stop is read every 25 ms of it
                if events.stop_requested():
                    time.sleep(0.3)  # the step in flight ends
                    return
                time.sleep(0.025)
            yield "frame"

    wrapped = events.handler(frames, 0)
    # dropped: advanced once, then left at its yield
    dropped = wrapped(gr.Request(session_hash="dropped"))
    assert next(dropped) == "frame"
    t = time.perf_counter()
    assert events.RUNS.stop("dropped", wait_s=10.0, idle_s=0.3)
    waited = time.perf_counter() - t
    assert 0.25 <= waited < 2.0, f"Stop waited {waited:.2f} s for a run nobody advances"
    dropped.close()  # as the collector would: the run ends then
    assert not events.RUNS.stop("dropped")
    # advanced: a frame is being made when Stop comes; Stop waits for its end, past idle_s
    going = wrapped(gr.Request(session_hash="going"))
    out: list[object] = []
    reader = threading.Thread(target=lambda: out.extend(going))
    reader.start()
    time.sleep(0.2)
    t = time.perf_counter()
    assert events.RUNS.stop("going", wait_s=10.0, idle_s=0.01)
    waited = time.perf_counter() - t
    assert not events.RUNS.stop("going"), "Stop returned before the run it waited for ended"
    assert waited < 2.0
    reader.join(5)
    assert not reader.is_alive() and out == []  # the frame begun before Stop was its last, never finished
