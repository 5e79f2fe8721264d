"""The sweep chart and the answer rules' views (playground/charts/sweep.py) on hand-made records: every number
drawn is the record's, the axis spans every value while a sweep runs, accuracy appears only with a checker,
and model text is escaped."""
import pytest

from playground.charts.sweep import answers_figure, answers_html, point_html, sweep_figure


def point(value, **measures):
    base = {"value": value, "n": 4, "loop_rate": 0.25, "distinct_1": 0.5, "distinct_2": 0.7, "distinct_3": 0.8,
            "surprisal": 1.2, "entropy": 1.5, "length": 6.0, "modal_answer": "<b>a</b>", "modal_share": 0.75}
    return {**base, **measures}


def record(points, values, expected=(), **extra):
    return {"param": "temperature", "strategy": "sampling", "model": "toy", "n": 4, "tokens": 8, "seed": 0,
            "values": values, "points": points, "expected": list(expected), "loop_repeats": 3, "stopped": False,
            "done": True, **extra}


def test_each_measure_is_the_points_own_and_accuracy_only_with_a_checker():
    rec = record([point(0.5, accuracy=1.0), point(1.0, loop_rate=0.5, accuracy=0.5)], [0.5, 1.0], ["a"])
    fig = sweep_figure(rec)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["loop rate"].y) == [0.25, 0.5] and list(by_name["accuracy"].y) == [1.0, 0.5]
    assert list(by_name["mean surprisal"].y) == [1.2, 1.2] and list(by_name["mean length"].y) == [6.0, 6.0]
    assert list(by_name["agree with the modal answer"].customdata) == ["&lt;b&gt;a&lt;/b&gt;"] * 2
    assert "accuracy" not in {t.name for t in sweep_figure(record(rec["points"], [0.5, 1.0])).data}


def test_a_running_sweep_spans_every_value_and_says_how_far_it_is():
    values = [0.1, 0.5, 1.0, 2.0]
    fig = sweep_figure(record([point(0.1)], values, done=False))
    assert "running: 1 of 4 values" in fig.layout.title.text
    low, high = fig.layout.xaxis3.range
    assert low < 0.1 and high > 2.0 and list(fig.layout.xaxis3.tickvals) == values
    stopped = sweep_figure(record([point(0.1)], values, stopped=True))
    assert "stopped after 1 of 4 values" in stopped.layout.title.text


def test_a_log_grid_draws_a_log_axis():
    fig = sweep_figure(record([point(0.01), point(1.0)], [0.01, 0.1, 1.0]), log_x=True)
    assert fig.layout.xaxis.type == "log"
    assert fig.layout.xaxis.range[0] < -2 and fig.layout.xaxis.range[1] > 0  # log10 of the ends, padded


def answers(accuracy=None, picks=None):
    picks = picks or [{"rule": "majority", "answer": "12", "votes": {"12": 3, "<i>13</i>": 1}},
                      {"rule": "deepconf", "answer": "<i>13</i>", "votes": {"<i>13</i>": 0.9}}]
    out = {"n": 4, "strategy": "sampling", "model": "toy", "extract": "last_number", "branches": [],
           "samples": [{"answer": a, "seed": i, "text": f"so {a}"} for i, a in enumerate(("12", "12", "12", "<i>13</i>"))],
           "picks": picks,
           "disagreements": {"agree": False, "answers": {"12": ["majority"], "<i>13</i>": ["deepconf"]}},
           "expected": ["12"] if accuracy else []}
    if accuracy:
        out["accuracy"] = accuracy
    return out


def test_the_rules_table_marks_picks_by_the_checkers_record_and_escapes_answers():
    curve = {"majority": [{"n": 1, "accuracy": 0.75, "low": 0.5, "high": 0.9, "subsets": 200},
                          {"n": 4, "accuracy": 1.0, "low": 0.2, "high": 1.0, "subsets": 1}],
             "deepconf": [{"n": 1, "accuracy": 0.7, "low": 0.5, "high": 0.9, "subsets": 200},
                          {"n": 4, "accuracy": 0.0, "low": 0.0, "high": 0.8, "subsets": 1}]}
    html = answers_html(answers(curve), "the sweep's temperature = 0.5")
    assert "<code>12</code> ✓" in html and "<code>&lt;i&gt;13&lt;/i&gt;</code> ✗" in html
    assert "<i>" not in html and "The rules disagree" in html and "<code>12</code> × 3" in html
    assert "temperature = 0.5" in html
    assert "<tr><td>seed 3</td><td><code>&lt;i&gt;13&lt;/i&gt;</code></td><td><code>so &lt;i&gt;13&lt;/i&gt;</code>" in html
    fig = answers_figure(answers(curve))
    assert [t.name for t in fig.data] == ["majority vote", "DeepConf"]
    majority = fig.data[0]
    assert [c[0] for c in majority.customdata] == [1, 4] and list(majority.y) == [0.75, 1.0]
    assert list(majority.x) == pytest.approx([1 / 1.06 ** 0.5, 4 / 1.06 ** 0.5])  # beside DeepConf's, on a log axis
    # the error bars reach the recorded Wilson ends, where there was a resampling (200 subsets; not the pool itself)
    assert [y + up for y, up in zip(majority.y, majority.error_y.array)] == pytest.approx([0.9, 1.0])
    assert [y - down for y, down in zip(majority.y, majority.error_y.arrayminus)] == pytest.approx([0.5, 1.0])
    assert [c[1:3] for c in majority.customdata] == [[0.5, 0.9], [0.2, 1.0]]  # the hover keeps every interval


def test_without_a_checker_no_marks_and_no_accuracy_chart():
    html = answers_html(answers())
    assert "✓" not in html and "✗" not in html
    assert answers_figure(answers()) is None


def test_agreeing_rules_say_so():
    rec = answers(picks=[{"rule": "majority", "answer": "12", "votes": {"12": 3}}])
    rec["disagreements"] = {"agree": True, "answers": {"12": ["majority"]}}
    assert "The rules agree." in answers_html(rec)


def test_a_point_opened_lists_its_samples_with_the_answers_the_sweep_read():
    p = point(0.5, samples=[{"seed": 0, "text": "<b>a</b> time"}, {"seed": 1, "text": "the hill"}],
              answers=["<b>a</b>", None])
    html = point_html(record([p], [0.5]), 0)
    assert "<b>temperature = 0.5</b>: 4 samples, modal answer <code>&lt;b&gt;a&lt;/b&gt;</code>" in html
    assert "loop rate 0.25" in html and "mean entropy 1.5" in html
    assert "<tr><td>seed 0</td><td><code>&lt;b&gt;a&lt;/b&gt;</code></td><td><code>&lt;b&gt;a&lt;/b&gt; time</code>" in html
    assert "<tr><td>seed 1</td><td><code>None</code></td>" in html
