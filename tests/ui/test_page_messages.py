"""What the page's status line says, with the handlers called directly (no browser): a refused input
stays written there, out-of-range values are refused with the field and its range, a long prompt is
announced while it is read, a run ends with its true reason, and share links carry only what differs
from the defaults."""
from __future__ import annotations

import dataclasses
import time
from urllib.parse import parse_qsl

import gradio as gr
import pytest
from page_events import call

from playground.engine import READING_REASON, Request, stream
from playground.errors import InvalidRequest
from playground.models import DEFAULT_MODEL, MAX_NEW_TOKENS
from playground.serving.budget import FINISH_REASON as OUT_OF_TIME
from playground.serving.budget import Budget
from playground.ui import events, share
from playground.ui.components import share_query
from playground.ui.events import handler
from playground.ui.handlers import generate, restore, status_html, stopped
from playground.ui.page import build_demo

pytestmark = pytest.mark.filterwarnings("ignore:.*no_silent_downcasting")


# --- a refused input stays in the status line -------------------------------------------------------

def test_a_refusal_is_written_into_the_status_and_raised_as_the_toast(store):
    status = object()  # stands for the event's status output (Gradio takes a dict of some outputs)

    def run(top_p):
        for frame in generate(store, Request("toy", "sampling", "1 2", {"top_p": top_p}, max_new_tokens=4)):
            yield [frame.status]

    wrapped = handler(run, 1, status=status)
    events = wrapped(0)
    update = next(events)
    assert list(update) == [status]
    assert "Not run:" in update[status] and "top_p must be in (0, 1], got 0" in update[status]
    with pytest.raises(gr.Error, match=r"top_p must be in \(0, 1\], got 0"):
        next(events)
    # the next run writes its own status over it (after saying it loads the model, where it does)
    assert any("reading the prompt" in update[0] for update in wrapped(0.9))


def test_the_refusal_in_the_status_is_escaped(store):
    status = object()

    def run():
        raise InvalidRequest("token <eos> is not allowed")
        yield  # pragma: no cover

    update = next(handler(run, 0, status=status)())
    assert "&lt;eos&gt;" in update[status] and "<eos>" not in update[status]


def test_without_a_status_output_only_the_toast_is_raised():
    def run():
        raise InvalidRequest("nope")
        yield  # pragma: no cover

    with pytest.raises(gr.Error, match="nope"):
        next(handler(run, 0)())


# --- out-of-range values are refused, not clamped ----------------------------------------------------

def test_top_p_zero_is_refused_with_the_field_and_its_range(store):
    with pytest.raises(InvalidRequest, match=r"^top_p must be in \(0, 1\], got 0"):
        next(generate(store, Request("toy", "sampling", "1 2", {"top_p": 0})))


def test_max_new_tokens_100000_is_refused_with_the_field_and_its_range(store):
    with pytest.raises(InvalidRequest, match=rf"^max_new_tokens must be an integer in \[1, {MAX_NEW_TOKENS}\], "
                                             r"got 100000"):
        next(generate(store, Request("toy", "sampling", "1 2", max_new_tokens=100000)))


# --- a long prompt is announced while it is read ----------------------------------------------------

def test_the_prompt_is_announced_with_its_token_count_before_the_first_token(store):
    prompt = " ".join(["1 2 3 4"] * 10)
    frames = generate(store, Request("toy", "greedy", prompt, max_new_tokens=3))
    first = next(frames)
    n = len(store.get("toy").encode(prompt, "", None))
    assert not first.trace["tokens"] and first.trace["finish_reason"] == READING_REASON and not first.final
    assert f"reading the prompt ({n} tokens)…" in first.status
    second = next(frames)
    assert len(second.trace["tokens"]) == 1 and "reading the prompt" not in second.status
    assert "generating" in second.status


def test_the_engine_stream_announces_only_when_asked(store):
    req = Request("toy", "greedy", "1 2", {}, max_new_tokens=2)
    plain = [t.finish_reason for t in stream(store, req)]
    assert READING_REASON not in plain and plain[-1] == "length"
    announced = [(t.finish_reason, len(t.tokens), t.extra.get("prompt_tokens")) for t in stream(store, req, announce=True)]
    assert announced[0] == (READING_REASON, 0, 2)
    assert [reason for reason, _, _ in announced[1:]] == plain


def _slowly(progress, seconds=0.3):
    """``progress``, each report followed by ``seconds`` of the work it announces (a model converting)."""
    def heard(fraction, message):
        progress(fraction, message)
        time.sleep(seconds)
    return heard


def test_a_first_use_load_is_said_in_the_status_line_while_it_runs(store):
    def decode(req, progress):
        progress(0.4, "loading toy: converting weights")
        time.sleep(0.3)
        yield from stream(store, req, progress, announce=True)

    said = []
    frames = list(generate(store, Request("toy", "greedy", "1 2", max_new_tokens=2), decoder=decode,
                           progress=lambda fraction, message: said.append((fraction, message))))
    assert said[0] == (0.4, "loading toy: converting weights")  # the progress bar still hears it
    first = frames[0]
    assert "loading toy: converting weights… 40%" in first.status and "generating" not in first.status
    assert not first.final and first.trace["model"] == "toy" and not first.trace["tokens"]
    assert READING_REASON == frames[1].trace["finish_reason"]  # then the prompt's reading, as before
    assert "converting" not in frames[-1].status


def test_the_page_s_status_line_says_a_first_use_load_while_it_runs(store):
    """Through the built page's Generate event (its inputs as one dict): the first update of #pg-status
    names the load, not 'Ready.', and the run's own status follows."""
    def decode(req, progress):
        progress(0.4, f"loading {req.model}: converting weights")
        time.sleep(0.3)
        yield from stream(store, req, progress, announce=True)

    demo = build_demo(store, decoder=decode)
    try:
        fn = next(f for f in demo.fns.values() if f.api_name == "explore")
        set_to = {"pg-model": "toy", "pg-strategy": "greedy", "pg-prompt": "1 2", "pg-seed": 0}
        updates = list(call(fn, lambda c: set_to.get(getattr(c, "elem_id", None), c.value)))
    finally:
        demo.close()
    said = [v for u in updates for c, v in u.items() if getattr(c, "elem_id", None) == "pg-status"]
    assert "loading toy: converting weights… 40%" in said[0], said[0]
    assert "converting" not in said[-1] and "finished at end-of-sequence" in said[-1]


def test_a_speculative_run_says_it_measures_the_plain_baseline_after_its_last_token(store):
    req = Request("toy", "speculative", "1 2", {"draft": "toy-small"}, max_new_tokens=6)
    frames = list(generate(store, req, text_seconds=0.0,
                           decoder=lambda req, progress: stream(store, req, _slowly(progress), announce=True)))
    measuring = [f for f in frames if "measuring the plain baseline" in f.status]
    assert measuring and "generating" not in measuring[0].status and not measuring[0].final
    assert len(measuring[0].trace["tokens"]) == 6  # said after the last token, over the text as it stands
    assert "measuring" not in frames[-1].status and frames[-1].final


# --- a run ends with its true reason ----------------------------------------------------------------

def test_a_run_that_made_all_its_tokens_says_length_even_past_the_deadline(store):
    spent = Budget(seconds=1e-9)  # passed by the time the first step is done
    trace = list(stream(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=1), budget=spent))[-1]
    assert trace.finish_reason == "length" and len(trace.tokens) == 1
    assert "reached max new tokens" in status_html(trace.to_dict(), final=True)
    # a run with steps still to make is cut by the budget, between two steps
    cut = list(stream(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=5), budget=spent))[-1]
    assert cut.finish_reason == OUT_OF_TIME and len(cut.tokens) == 1


def test_the_page_says_length_for_a_finished_run_under_a_spent_budget(store):
    frames = list(generate(store, Request("toy", "greedy", "1 2", max_new_tokens=3),
                           decoder=lambda req, progress: stream(store, req, progress, Budget(seconds=1e-9))))
    assert frames[-1].final and "stopped: this server's time budget" in frames[-1].status  # 3 tokens asked, 1 made
    frames = list(generate(store, Request("toy", "greedy", "1 2", max_new_tokens=1),
                           decoder=lambda req, progress: stream(store, req, progress, Budget(seconds=1e-9))))
    assert "reached max new tokens" in frames[-1].status


def test_a_stopped_run_says_at_which_step(store):
    frames = generate(store, Request("toy", "greedy", "1 2", max_new_tokens=8), text_seconds=0)
    partial = [f for _, f in zip(range(5), frames)][-1]  # reading + 4 tokens, then the page stops it
    frames.close()
    assert len(partial.trace["steps"]) == 4
    assert "stopped at step 3" in status_html(stopped(partial.trace), final=True)


# --- share links carry only what differs from the defaults -------------------------------------------

def default_link(**changes):
    cfg = dataclasses.replace(share.defaults(), **changes)
    return share_query(cfg.model, cfg.strategy, cfg.prompt, cfg.system, cfg.chat, cfg.seed, cfg.max_new_tokens,
                       {**share.strategy_defaults(cfg.strategy), **cfg.params}, cfg.compare_strategy,
                       share.strategy_defaults(cfg.compare_strategy), run="generate", forced=cfg.forced)


def test_the_page_defaults_are_the_model_and_prompt_the_page_opens_with():
    assert share.defaults().model == DEFAULT_MODEL and share.defaults().prompt == share.DEFAULT_PROMPT


def test_the_link_of_a_default_run_is_short_and_restores_the_same_configuration():
    query = default_link()
    print(f"\n[share] default run's link: {len(query)} characters: {query}")
    assert len(query) < 200
    cfg, warnings = restore(dict(parse_qsl(query.lstrip("?"))))
    assert warnings == []
    assert cfg == dataclasses.replace(share.defaults(), run="generate")  # the rest is filled in with defaults


def test_a_changed_top_p_is_carried_and_restored():
    query = default_link(params={"top_p": 0.7})
    pairs = dict(parse_qsl(query.lstrip("?")))
    assert pairs.get("p.top_p") == "0.7" and not [k for k in pairs if k.startswith("p.") and k != "p.top_p"]
    cfg, warnings = restore(pairs)
    assert warnings == [] and cfg.strategy == "sampling" and cfg.params == {"top_p": 0.7}


def test_a_branch_link_carries_its_forced_tokens_and_a_changed_strategy():
    query = default_link(model="toy", strategy="greedy", prompt="1 2", forced="0:9,3:12")
    pairs = dict(parse_qsl(query.lstrip("?")))
    assert {k: pairs[k] for k in ("model", "strategy", "prompt", "force")} == \
        {"model": "toy", "strategy": "greedy", "prompt": "1 2", "force": "0:9,3:12"}
    cfg, _ = restore(pairs)
    assert (cfg.model, cfg.strategy, cfg.prompt, cfg.forced) == ("toy", "greedy", "1 2", "0:9,3:12")


# --- Stop: the run reads it between two frames and sends its own last frame ----------------------------

def test_stop_ends_a_handler_run_after_the_step_in_flight_with_a_stopped_frame(store):
    def run():
        for frame in generate(store, Request("toy", "sampling", "1 2", max_new_tokens=40), text_seconds=0):
            yield [frame.status, len(frame.trace["tokens"]), frame.final]

    frames = handler(run, 0)(gr.Request(session_hash="stop-test"))
    seen = [next(frames) for _ in range(5)]  # the prompt's announcement, then 4 tokens
    assert events.RUNS.stop("stop-test") is True  # the page's Stop for this session
    rest = list(frames)
    assert [n for _, n, _ in rest] == [4] and rest[-1][2]  # no token after it: one final frame says so
    assert "stopped at step 3" in rest[-1][0]
    assert seen[-1][1] == 4 and events.RUNS.stop("stop-test") is False  # the run has ended


def test_stop_is_read_after_every_token_even_one_not_sent(store):
    """Tokens decoded faster than the text interval are not sent one by one; Stop still ends the run
    after the token in flight, not at the next frame that would have gone out."""
    from playground.ui.handlers import default_decoder
    inner = default_decoder(store)

    def decode(req, progress=None):
        for trace in inner(req, progress):
            yield trace
            if len(trace.tokens) == 5:
                events.RUNS.stop("stop-unsent")  # Stop arrives after the fifth token, the sixth in flight

    def run():
        for frame in generate(store, Request("toy", "sampling", "1 2", max_new_tokens=40), text_seconds=60,
                              decoder=decode):
            yield [frame.status, len(frame.trace["tokens"]), frame.final]

    frames = list(handler(run, 0)(gr.Request(session_hash="stop-unsent")))
    assert [n for _, n, _ in frames] == [0, 1, 6]  # reading, the first token alone, then the stopped end
    assert "stopped at step 5" in frames[-1][0] and frames[-1][2]


def test_counts_are_written_in_the_singular_for_one():
    one = {"model": "toy", "strategy": "greedy", "tokens": [{"id": 3, "text": " a"}], "steps": [{}],
           "finish_reason": "length", "timing": {}}
    assert "· 1 token ·" in status_html(one, final=True)
    assert "· 2 tokens ·" in status_html(dict(one, tokens=one["tokens"] * 2), final=True)
