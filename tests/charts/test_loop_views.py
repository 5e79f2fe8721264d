"""The views of loops and of the watch-list (playground/charts/loops.py, watch.py), the loop's mark in the
coloured text and the status line of a run that loop_stop ended: every value drawn is the trace's record.
The toy, greedy on "1 2", writes " a time ..."; forcing " a" at step 2 makes it write " time" again at step 3,
a loop of period 2 found there."""
from __future__ import annotations

import math
import re

import pytest

from playground.charts.distribution import distribution_figure
from playground.charts.loops import copies, loops_figure, span_text
from playground.charts.loops import views as loop_views
from playground.charts.palette import WATCHED
from playground.charts.text import token_html
from playground.charts.views import strategy_views
from playground.charts.watch import floor_of, watch_figure, watched, watched_colours
from playground.charts.watch import views as watch_views
from playground.engine import Request, run
from playground.ui.handlers import status_html

WATCH = "a, time, there"


def looped(store, toy, stop: bool = True) -> dict:
    a = toy.tokenizer("a", add_special_tokens=False)["input_ids"][0]
    return run(store, Request("toy", "greedy", "1 2", {"loop_repeats": 2, "loop_stop": stop, "watch": WATCH},
                              seed=0, max_new_tokens=12, forced={2: a})).to_dict()


def test_the_toy_loops_where_the_tests_say(store, toy):
    trace = looped(store, toy)
    assert trace["finish_reason"] == "loop" and len(trace["tokens"]) == 4
    assert [(lp["start"], lp["period"], lp["repeats"], lp["length"], lp["found_at"]) for lp in trace["loops"]] == [
        (0, 2, 2, 4, 3)]


def test_the_loop_view_draws_the_records(store, toy):
    trace = looped(store, toy, stop=False)
    loop = trace["loops"][0]
    fig = loops_figure(trace, selected=1)
    bands = fig.data[0]
    assert list(bands.base) == [s - 0.5 for s, _, _ in copies(loop)] == [-0.5, 1.5]
    assert list(bands.x) == [loop["period"]] * loop["repeats"]
    found = next(t for t in fig.data if t.type == "scatter")
    assert list(found.x) == [loop["found_at"]]
    assert any(s.type == "line" and s.x0 == 1 == s.x1 for s in fig.layout.shapes)  # the selected step
    words = f"(period {loop['period']}) ×{loop['repeats']} from step {loop['start']}, found at step {loop['found_at']}"
    assert fig.layout.title.text == "Loop: «a time» (period 2) ×2"
    assert words in fig.layout.annotations[-1].text
    assert [v.title for v in loop_views(trace, 1)] == ["Loops"]


def test_a_part_copy_is_its_own_paler_band():
    loop = {"start": 2, "period": 3, "repeats": 2, "length": 8, "found_at": 7, "ids": [1, 2, 3], "text": "x"}
    assert copies(loop) == [(2, 3, True), (5, 3, True), (8, 2, False)]
    fig = loops_figure({"loops": [loop, dict(loop, start=20, length=6, found_at=25)], "steps": [{}] * 30})
    assert list(fig.data[0].x) == [3, 3, 2] and list(fig.data[1].x) == [3, 3]
    assert fig.layout.title.text == "Loops: 2 found"
    assert "a paler band" in fig.layout.annotations[-1].text
    assert list(fig.data[0].customdata[2]) == [8, 9, "part of a copy", "x"]


def test_a_long_span_is_cut_in_the_title_and_the_status_line():
    loop = {"start": 0, "period": 14, "repeats": 3, "length": 42, "found_at": 41, "ids": list(range(14)),
            "text": " the more you practice, the more you learn & <the> better"}
    assert span_text(loop) == "·the more you practice, the more you le…"
    trace = {"loops": [loop], "steps": [{}] * 42, "finish_reason": "loop"}
    assert loops_figure(trace).layout.title.text == (
        "Loop: «·the more you practice, the m…» (period 14) ×3 · it stopped the run")
    assert "«·the more you practice, the more you learn &amp; &lt;the&gt; better» (period 14) ×3 from step 0, found " \
        "at step 41, 42 tokens" in loops_figure(trace).layout.annotations[-1].text
    assert "stopped: a loop of 14 tokens × 3 at step 41 («·the more you practice" in status_html(trace, final=True)


def test_the_watch_view_draws_the_records(store, toy):
    trace = looped(store, toy, stop=False)
    heading, rows = watched(trace)
    assert [w["id"] for w in heading] == [w["id"] for w in trace["watch"]] and len(rows) == len(trace["steps"])
    fig = watch_figure(trace, selected=2)
    floor = floor_of(rows)
    assert len(fig.data) == 2 * len(heading)  # per token: the model's (dashed) and after the chain (solid)
    for j in range(len(heading)):
        raw, final = fig.data[2 * j], fig.data[2 * j + 1]
        assert list(final.y) == [s["watch"][j]["prob"] or floor for s in trace["steps"]]
        assert list(raw.y) == [s["watch"][j]["raw_prob"] or floor for s in trace["steps"]]
        assert list(final.x) == list(range(len(trace["steps"])))
        assert raw.line.color == final.line.color == WATCHED[j] and raw.line.dash == "dash"
        assert [c[3] for c in final.customdata] == [s["watch"][j]["rank"] for s in trace["steps"]]
        assert [c[5] for c in final.customdata] == [s["watch"][j]["raw_rank"] for s in trace["steps"]]
    assert fig.layout.yaxis.type == "log"
    assert any(s.type == "line" and s.x0 == 2 == s.x1 for s in fig.layout.shapes)
    best = min(trace["steps"][2]["watch"], key=lambda w: w["rank"])
    assert f"rank {best['rank']:,}" in fig.layout.title.text
    assert "highest p:" in fig.layout.annotations[-1].text
    assert "Watch-list" in [v.title for v in strategy_views(trace, 2)]


def test_a_zero_probability_sits_on_the_floor_a_decade_under_the_rest(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"temperature": 0.7, "top_k": 1, "watch": WATCH}, seed=1,
                               max_new_tokens=6)).to_dict()
    _, rows = watched(trace)
    zeros = [w for _, ws in rows for w in ws if w["prob"] == 0]
    assert zeros  # top_k 1 cuts every watched token that is not the argmax
    smallest = min(w[k] for _, ws in rows for w in ws for k in ("prob", "raw_prob") if w[k])
    assert floor_of(rows) < smallest and math.log10(floor_of(rows)) == int(math.log10(floor_of(rows)))
    fig = watch_figure(trace)
    label = next(a for a in fig.layout.annotations if a.text == "0 (cut)")
    assert label.y == math.log10(floor_of(rows))  # a log axis places an annotation by its exponent


def test_without_the_records_no_views(store):
    trace = run(store, Request("toy", "greedy", "1 2", {}, seed=0, max_new_tokens=4)).to_dict()
    assert loop_views(trace) == [] and watch_views(trace) == []
    looking = run(store, Request("toy", "greedy", "1 2", {"loop_repeats": 3}, seed=0, max_new_tokens=4)).to_dict()
    assert looking["loops"] == [] and loop_views(looking) == []  # looked for, none found
    assert 'pg-loop' not in token_html(looking)


def test_the_text_marks_the_loops_tokens(store, toy):
    trace = looped(store, toy, stop=False)
    html = token_html(trace)
    spans = re.findall(r'<span class="([^"]*)" data-step="(\d+)"', html)
    marked = [int(step) for classes, step in spans if "pg-loop" in classes.split()]
    starts = [int(step) for classes, step in spans if "pg-loop-copy" in classes.split()]
    loop = trace["loops"][0]
    assert marked == list(range(loop["start"], loop["start"] + loop["length"])) and starts == [0, 2]
    assert "copy 2 of 2" in html


@pytest.mark.parametrize("stop", [True, False])
def test_the_status_line_says_a_loop_stopped_the_run(store, toy, stop):
    trace = looped(store, toy, stop=stop)
    line = status_html(trace, final=True)
    if stop:
        assert "stopped: a loop of 2 tokens × 2 at step 3 («a time»)" in line
    else:
        assert "stopped: a loop" not in line and "finished at end-of-sequence" in line


def test_the_distribution_marks_the_watched_tokens_in_their_colours(store, toy):
    trace = looped(store, toy, stop=False)
    colours = watched_colours(trace)
    assert list(colours.values()) == list(WATCHED[:3])
    step = trace["steps"][1]
    fig = distribution_figure(trace, 1)
    texts = list(fig.layout.xaxis.ticktext)
    shown = sorted(step["candidates"], key=lambda c: (-c["prob"], -c["raw_prob"]))[:len(texts)]  # greedy: no chain
    for c, tick in zip(shown, texts):
        assert f'color:{colours[c["id"]]}' in tick if c["id"] in colours else "color:" not in tick
    assert any(c["id"] in colours for c in shown)
    assert "the watch-list's tokens" in fig.layout.annotations[-1].text
    plain = dict(trace, watch=[])
    assert not any("color:" in t for t in distribution_figure(plain, 1).layout.xaxis.ticktext)
