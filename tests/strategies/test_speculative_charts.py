"""Views of a speculative trace: built from the JSON alone, drawn from the decoder's records, escaped,
and without torch."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from playground.charts.speculative import default_round, round_figure, round_of_step, timeline_html, views
from playground.engine import Request, run
from playground.models import ModelStore
from strategies.speculative.speedup import break_even_alpha, expected_speedup


def speculative(prompt: str, n: int, seed: int, **params) -> dict:
    req = Request("toy", "speculative", prompt, params, seed=seed, max_new_tokens=n)
    return json.loads(run(ModelStore("cpu"), req).to_json())


@pytest.fixture(scope="module")
def trace() -> dict:
    return speculative("1 2 3 4 5 6 7 8 0 1 2", 12, 2, draft="toy-small", temperature=1.5, gamma=3)


def test_views_of_a_speculative_trace(trace):
    got = views(trace)
    assert [v.title for v in got] == ["speculative rounds", "round detail", "accepted per round", "speed", "break-even lanes"]
    assert got[0].html and all(v.figure is not None for v in got[1:])
    assert views({"steps": [], "tokens": []}) == [] and views({**trace, "rounds": []}) == []


def test_timeline_colours_and_escapes(trace):
    t = copy.deepcopy(trace)
    t["rounds"][0]["draft"][0]["text"] = "<script>alert(1)</script>"
    page = timeline_html(t)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.count("#dcfce7") - 1 == sum(r["kept"] for r in t["rounds"])  # + legend
    struck = sum(len(r["draft"]) - r["accepted"] + sum(d["discarded"] for d in r["draft"]) for r in t["rounds"])
    assert page.count("line-through") - 3 == struck  # + legend: rejected, never checked, discarded


def test_round_detail_follows_the_selected_step(trace):
    rejected = [r["round"] for r in trace["rounds"] if r["resampled"]]
    assert default_round(trace) == (rejected[-1] if rejected else trace["rounds"][-1]["round"])
    assert round_of_step(trace, None) == default_round(trace) == round_of_step(trace, 10_000)
    for r in trace["rounds"]:
        for step in range(r["start"], r["start"] + r["committed"]):
            assert round_of_step(trace, step) == r["round"]
            title = views(trace, step=step)[1].figure.layout.title.text
            assert title.startswith(f"round {r['round']}: kept {r['kept']} of {r['gamma']}")
    fig = round_figure(trace, 0)
    assert list(fig.data[0].y) == [d["p_target"] for d in trace["rounds"][0]["draft"]]


def test_a_resampled_token_shows_what_it_was_drawn_from_and_the_target(trace):
    r = next(r for r in trace["rounds"] if r["resampled"])
    fig = round_figure(trace, r["round"])
    added = r["resampled"]
    assert "residual norm(max(0, target - draft))" in fig.layout.annotations[1].text
    drawn = next(d for d in fig.data if d.name == "drawn from")
    target = [d for d in fig.data if d.name == "target"][1]  # the second panel's target bars
    assert list(drawn.y) == [e["drawn_prob"] for e in r["drawn_top"]]
    assert list(target.y) == [e["p_target"] for e in r["drawn_top"]]
    title = fig.layout.title.text
    assert f"p {added['drawn_prob']:.3g} in what it was drawn from" in title
    assert f"target p {added['p_target']:.3g}" in title


def test_topk_round_says_where_its_replacement_came_from():
    t = speculative("once upon the hill rose high once upon", 6, 0, draft="prompt_lookup", verify="topk",
                    verify_top_k=1, temperature=0, gamma=4, measure_baseline=False)
    r = t["rounds"][0]
    assert r["resampled"] and r["drawn_from"] == "target"
    fig = round_figure(t, 0)
    assert "residual" not in fig.layout.annotations[1].text
    assert "target's distribution after the chain (replacement token)" in fig.layout.annotations[1].text
    own = next(d for d in fig.data if d.name == "target model's own")
    cut = next(d for d in fig.data if d.name.startswith("K-th largest"))
    assert list(own.y) == [d["raw_p_target"] for d in r["draft"]]
    assert list(cut.y) == [d["raw_kth"] for d in r["draft"] if d["evaluated"]]
    assert "residual" not in timeline_html(t)


def test_a_round_that_ended_the_text_shows_no_bonus():
    t = speculative("once upon a time there lived happily", 8, 0, draft="toy", gamma=4, measure_baseline=False)
    (r,) = t["rounds"]
    title = round_figure(t, 0).layout.title.text
    assert title == "round 0: kept 2 of 2 drafts; the text ended at &lt;eos&gt;"  # escaped: plotly reads tags
    assert "bonus" not in title and "text ended" in timeline_html(t)


def test_accepted_lengths_histogram(trace):
    fig = views(trace)[2].figure
    counts = list(fig.data[0].y)
    drafted = [r for r in trace["rounds"] if r["gamma"] > 0]
    assert sum(counts) == len(drafted)
    assert counts[drafted[0]["kept"]] >= 1


def test_speed_view_draws_the_recorded_curve(trace):
    w = trace["timing"]["speculative"]
    curve = w["expected_speedup"]
    fig = views(trace)[3].figure
    lev = next(d for d in fig.data if d.name == "Leviathan: verify = 1 step")
    assert list(lev.x) == curve["gamma"] and list(lev.y) == curve["verify_one_step"]
    alpha, c = trace["speculative"]["alpha"], w["c"]
    assert curve["verify_one_step"][2] == pytest.approx(expected_speedup(alpha, 3, c), rel=1e-4)
    assert f"measured {w['measured_speedup']:.3g}x" in fig.layout.title.text


def test_expected_speedup_formula():
    # Leviathan et al. 2022, section 3.3: alpha = 0.8, gamma = 5, c = 0.05 gives about 3.0x.
    assert expected_speedup(0.8, 5, 0.05) == pytest.approx((1 - 0.8**6) / (0.2 * 1.25))
    assert expected_speedup(1.0, 3, 0.0) == 4.0  # every draft kept, free draft: gamma + 1 tokens a pass
    assert expected_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)
    assert expected_speedup(0.5, 2, 0.0, verify_cost=1.75) == pytest.approx(1.75 / 1.75)
    even = break_even_alpha(2, 0.1, 1.0)  # 1 + a + a^2 = 1.2
    assert even == pytest.approx((-1 + (1 + 4 * 0.2) ** 0.5) / 2, abs=1e-9)
    assert break_even_alpha(2, 1.0, 2.0) == 1.0  # 3 tokens a round cannot pay for 4 steps


def test_speed_view_without_a_baseline(trace):
    t = copy.deepcopy(trace)
    t["timing"]["speculative"]["baseline"] = None
    assert views(t)[3].html and "measure_baseline" in views(t)[3].html


def test_charts_import_no_torch():
    code = "import sys, playground.charts.speculative; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0


def test_speculative_steps_record_each_stage_decision(store):
    """The target's chain at every committed position records its decisions, so the distribution
    chart draws the top-p and min-p lines the verifier's target really used."""
    from playground.engine import Request, run
    d = run(store, Request("toy", "speculative", "1 2", {"draft": "toy-small", "temperature": 1.5, "top_p": 0.9,
                                                          "min_p": 0.05}, seed=1, max_new_tokens=6)).to_dict()
    for step in d["steps"]:
        by_name = {s["name"]: s for s in step["stages"]}
        assert by_name["top_p"]["decision"]["p"] == 0.9
        assert by_name["min_p"]["decision"]["threshold"] == pytest.approx(
            0.05 * by_name["min_p"]["decision"]["top_prob"], rel=1e-5)


def test_a_slow_run_says_why_in_one_line():
    from playground.charts.speculative import plural, slow_reason
    assert plural(1, "round") == "1 round" and plural(2, "round") == "2 rounds"
    base = {"speculative": {"draft": "early_exit", "draft_kind": "early_exit", "alpha": 0.07, "mean_gamma": 4},
            "timing": {"speculative": {"measured_speedup": 0.4, "c": 0.3, "verify_cost": {"5": 1.2}}}}
    assert slow_reason(base).startswith("α 0.07: the early_exit draft rarely agrees with the target; a deeper")
    costly = copy.deepcopy(base)
    costly["speculative"]["alpha"] = 0.8
    costly["timing"]["speculative"]["c"] = 0.9
    assert slow_reason(costly).startswith("c 0.90: a draft step costs 90% of a target step")
    heavy_verify = copy.deepcopy(costly)
    heavy_verify["timing"]["speculative"].update(c=0.1, verify_cost={"5": 2.4})
    assert slow_reason(heavy_verify).startswith("verifying 5 tokens in one pass costs 2.4 plain steps")
    fast = copy.deepcopy(base)
    fast["timing"]["speculative"]["measured_speedup"] = 1.3
    assert slow_reason(fast) == ""
