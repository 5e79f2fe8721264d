"""The What-if tab's Sweep panel and its answer rules, through the built page's own events on the toy: the sweep
draws its chart value by value, keeps its record and JSON, hands its points to the rules, refuses a bad grid
with the value and the range (and serves the next run), and Stop keeps the values done."""
import html
import json
from types import SimpleNamespace
from urllib.parse import parse_qsl

import gradio as gr
import pytest
from page_events import call

from playground.engine import Request
from playground.errors import InvalidRequest
from playground.ui import events
from playground.ui.page import build_demo
from playground.ui.sweep_panel import first_param, grid_spec, grid_values, suggested_grid, sweep_status, throttled
from playground.whatif.sweep import sweep

SETTINGS = {"pg-model": "toy", "pg-strategy": "sampling", "pg-prompt": "1 2", "pg-seed": 0,
            "pg-sweep-param": "temperature", "pg-sweep-scale": "linear", "pg-sweep-start": 0.5, "pg-sweep-end": 2.0,
            "pg-sweep-count": 3, "pg-sweep-n": 24, "pg-sweep-tokens": 4, "pg-sweep-extract": "choices",
            "pg-sweep-argument": "a|the", "pg-sweep-known": "a"}


@pytest.fixture(scope="module")
def page(store):
    demo = build_demo(store)
    yield demo
    demo.close()


def event(demo, output_id):
    """The page's event whose first output is the component ``output_id``."""
    return next(f for f in demo.fns.values() if f.outputs and getattr(f.outputs[0], "elem_id", None) == output_id)


def by_id(frame):
    return {getattr(c, "elem_id", None) or c: v for c, v in frame.items()}


def value_of(settings):
    return lambda c: settings.get(getattr(c, "elem_id", None), c.value)


@pytest.fixture(scope="module")
def swept(page):
    frames = list(call(event(page, "pg-sweep-plot"), value_of(SETTINGS)))
    return frames


def test_the_sweep_draws_each_value_as_it_comes_and_keeps_its_record(swept, store):
    charts = [by_id(f) for f in swept if any(getattr(c, "elem_id", None) == "pg-sweep-plot" for c in f)]
    assert len(charts) == 3, "one chart per value, drawn as the sweep goes"
    assert "running" in charts[0]["pg-sweep-status"] and "1 of 3 values" in charts[0]["pg-sweep-status"]
    assert "<b>done</b>" in charts[-1]["pg-sweep-status"]
    last = swept[-1]
    record = next(v for c, v in last.items() if isinstance(c, gr.State))
    assert [p["value"] for p in record["points"]] == [0.5, 1.25, 2.0] and record["dtype"] == "auto"  # the page's Weights
    # the page's sweep is the whatif sweep of the sidebar's run, point for point
    again = sweep(store, Request("toy", "sampling", "1 2", seed=0, max_new_tokens=4), "temperature",
                  [0.5, 1.25, 2.0], 24, "choices:a|the", ["a"], keep_samples=False)
    assert [(p["accuracy"], p["loop_rate"], p["distinct_2"]) for p in record["points"]] == \
        [(p["accuracy"], p["loop_rate"], p["distinct_2"]) for p in again["points"]]
    with open(by_id(last)["pg-sweep-file"], encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["param"] == "temperature" and len(saved["points"][0]["samples"]) == 24
    assert set(saved["points"][0]["samples"][0]) == {"seed", "ids", "text"}
    choices = by_id(last)["pg-rules-source"]["choices"]
    assert [c[1] for c in choices] == ["fresh", "0", "1", "2"] and choices[2][0] == "temperature = 1.25 (24 samples)"


def test_the_rules_read_a_sweep_points_own_samples(page, swept):
    record = next(v for c, v in swept[-1].items() if isinstance(c, gr.State))
    fn = event(page, "pg-rules-table")
    settings = {**SETTINGS, "pg-rules-source": "0", "pg-rules-branches": 2}
    state = next(c for c in fn.inputs if isinstance(c, gr.State) and c in swept[-1])
    frames = list(call(fn, lambda c: record if c is state else value_of(settings)(c)))
    out = by_id(frames[-1])
    table = out["pg-rules-table"]
    assert "majority vote" in table and "DeepConf" in table and "CoT-decoding" in table and "temperature = 0.5" in table
    modal = record["points"][0]["modal_answer"]
    assert f"<code>{modal}</code> ✓" in table  # the majority of the point's answers, checked against the known one
    assert f"× {record['points'][0]['answers'].count(modal)}" in table  # the point's own answers, counted
    assert out["pg-rules-plot"]["visible"] is True


@pytest.mark.parametrize("change, message", [
    ({"pg-sweep-count": 13}, r"the grid's values must be an integer in [1, 12], got 13"),
    ({"pg-sweep-count": 0}, r"the grid's values must be an integer in [1, 12], got 0"),
    ({"pg-sweep-start": None}, "the grid's start must be a finite number, got nothing"),
    ({"pg-sweep-scale": "log", "pg-sweep-start": 0}, "a log grid's start must be > 0, got 0"),
    ({"pg-sweep-start": -1.0}, "temperature"),
    ({"pg-sweep-n": 400, "pg-sweep-count": 12}, "n x values must be at most 4000, got 400 x 12"),
    ({"pg-sweep-extract": "regex", "pg-sweep-argument": ""}, "the regex extractor needs its argument"),
])
def test_a_bad_grid_is_refused_with_the_value_and_the_range_and_the_page_serves_on(page, change, message):
    fn = event(page, "pg-sweep-plot")
    frames = call(fn, value_of({**SETTINGS, **change, "pg-sweep-n": change.get("pg-sweep-n", 2),
                                "pg-sweep-tokens": 2}))
    first = next(frames)
    assert message in html.unescape(by_id(first)["pg-sweep-status"])
    with pytest.raises(gr.Error) as err:
        next(frames)
    assert message in html.unescape(str(err.value))
    fine = list(call(fn, value_of({**SETTINGS, "pg-sweep-count": 1, "pg-sweep-n": 2, "pg-sweep-tokens": 2})))
    assert "<b>done</b>" in by_id(fine[-2])["pg-sweep-status"]


def test_stop_keeps_the_values_done(page):
    fn = event(page, "pg-sweep-plot")
    frames = call(fn, value_of({**SETTINGS, "pg-sweep-count": 4}), None, gr.Request(session_hash="sweep-stop"))
    first = by_id(next(frames))
    assert "1 of 4 values" in first["pg-sweep-status"]
    assert events.RUNS.stop("sweep-stop")
    rest = [by_id(f) for f in frames]
    statuses = [f["pg-sweep-status"] for f in rest if "pg-sweep-status" in f]
    assert "stopped" in statuses[-1] and "1 of 4 values" in statuses[-1]
    assert len(rest[-1]["pg-rules-source"]["choices"]) == 2  # a fresh draw, and the one point done


def test_the_grid_and_the_parameters_range():
    assert grid_values(0.5, 2, 4, "linear") == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert grid_values(0.01, 1, 3, "log") == pytest.approx([0.01, 0.1, 1.0])
    start, stop, about = suggested_grid("sampling", "top_p")
    assert 0 < start < stop == 1.0 and "top_p" in about
    with pytest.raises(InvalidRequest, match=r"a log grid's stop must be > 0, got -1"):
        grid_values(1, -1, 3, "log")
    # a link writes the ends exactly: a grid restored from it is the grid swept
    assert grid_spec(0.1234567, 2.0, 3, "log") == "log:0.1234567:2:3"
    assert grid_values(*grid_spec(0.1234567, 2.0, 3, "linear").split(":")[1:], "linear") == grid_values(0.1234567, 2, 3, "linear")
    assert first_param(["loop_repeats", "num_beams"]) == "num_beams" and first_param(["top_k", "temperature"], "top_k") == "top_k"


def test_a_point_cut_by_stop_says_so_and_progress_is_throttled():
    record = {"points": [{"n": 200}, {"n": 70}], "values": [1, 2, 3], "stopped": True, "batched": False, "n": 200,
              "timing": {"seconds": 3.0}}
    assert "2 of 3 values · 200 samples each (the last 70, cut by Stop) (one run per seed)" in sweep_status(record)
    heard = []
    report = throttled(lambda f, m: heard.append(m), seconds=60)
    for i in range(50):
        report(i / 100, f"run {i + 1} of 50")
    report(0.5, "num_beams = 2: 50 samples (2 of 2)")
    assert heard == ["run 1 of 50", "num_beams = 2: 50 samples (2 of 2)"]  # a value's start always goes through


def test_a_click_on_a_point_of_the_chart_opens_its_samples_for_the_rules(page, swept):
    record = next(v for c, v in swept[-1].items() if isinstance(c, gr.State))
    fn = event(page, "pg-rules-source")
    out = by_id(fn.fn(record, gr.EventData(None, {"step": 1})))
    assert out["pg-rules-source"]["value"] == "1" and out["pg-rules-plot"]["visible"] is False
    opened = out["pg-rules-table"]
    assert "<b>temperature = 1.25</b>: 24 samples" in opened and opened.count("<tr><td>seed ") == 24
    assert isinstance(fn.fn(record, gr.EventData(None, {"step": 7})), type(gr.skip()))  # no such point: nothing changes


def test_a_sweep_goes_into_the_share_link_and_the_opened_page_sets_it_back_and_runs_it(page, swept):
    """Copy share link after a sweep: the link names its parameter, grid, N, tokens, extractor and known answer;
    the page opened at it fills the panel in, opens it on What if, and runs it (RUN_JS's "sweep")."""
    record_state = event(page, "pg-sweep-plot").outputs[2]
    record = swept[-1][record_state]
    link = next(f for f in page.fns.values() if f.outputs and getattr(f.outputs[0], "elem_id", None) == "pg-link"
                and len(f.inputs) > 5)
    query = call(link, lambda c: record if c is record_state else value_of(SETTINGS)(c))["value"]
    pairs = dict(parse_qsl(query.lstrip("?")))
    assert {k: v for k, v in pairs.items() if k.startswith("sweep")} == {
        "sweep": "temperature", "sweep_grid": "lin:0.5:2:3", "sweep_n": "24", "sweep_tokens": "4",
        "sweep_extract": "choices:a|the", "sweep_known": "a"}
    assert "sweep" not in call(link, lambda c: None if c is record_state else value_of(SETTINGS)(c))["value"]
    load = next(f for f in page.fns.values() if not f.inputs and f.outputs
                and "pg-sweep-param" in [getattr(c, "elem_id", None) for c in f.outputs]
                and "pg-example-note" not in [getattr(c, "elem_id", None) for c in f.outputs])
    opened = load.fn(SimpleNamespace(query_params=pairs))
    got = by_id(opened)
    assert (got["pg-sweep-param"]["value"], got["pg-sweep-scale"], got["pg-sweep-start"], got["pg-sweep-end"],
            got["pg-sweep-count"], got["pg-sweep-n"], got["pg-sweep-tokens"], got["pg-sweep-extract"],
            got["pg-sweep-argument"], got["pg-sweep-known"]) == \
        ("temperature", "linear", 0.5, 2.0, 3, 24, 4, "choices", "a|the", "a")
    assert got["pg-sweep"]["open"] is True
    flag = next(v for c, v in opened.items() if isinstance(c, gr.Textbox) and not c.visible and "sweep" in str(v))
    assert flag == "generate,sweep"  # the opened page runs, then runs the sweep (page.RUN_JS)
    flag_box = next(c for c, v in opened.items() if v is flag)
    rules = load.fn(SimpleNamespace(query_params={"model": "toy-think", "sweep_n": "12", "sweep_extract": "last_number",
                                                  "sweep_known": "9"}))  # the answer rules' settings alone
    got = by_id(rules)
    assert (got["pg-sweep-n"], got["pg-sweep-extract"], got["pg-sweep-known"], got["pg-sweep"]["open"]) == \
        (12, "last_number", "9", True)
    assert "pg-sweep-param" not in got and "pg-sweep-tokens" not in got and "sweep" not in str(rules[flag_box])
