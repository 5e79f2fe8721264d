"""Views of a speculative trace: built from the JSON alone, escaped, and without torch."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from playground.charts_speculative import default_round, expected_speedup, timeline_html, views
from playground.engine import Request, run
from playground.models import ModelStore


@pytest.fixture(scope="module")
def trace() -> dict:
    req = Request("toy", "speculative", "1 2 3 4 5 6 7 8 0 1 2",
                  {"draft": "toy-small", "temperature": 1.5, "gamma": 3}, seed=2, max_new_tokens=12)
    return json.loads(run(ModelStore("cpu"), req).to_json())


def test_views_of_a_speculative_trace(trace):
    got = views(trace)
    assert [v.title for v in got] == ["speculative rounds", "round detail", "accepted per round", "speed"]
    assert got[0].html and all(v.figure is not None for v in got[1:])
    assert views({"steps": [], "tokens": []}) == [] and views({**trace, "rounds": []}) == []


def test_timeline_colours_and_escapes(trace):
    t = copy.deepcopy(trace)
    t["rounds"][0]["draft"][0]["text"] = "<script>alert(1)</script>"
    page = timeline_html(t)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.count("#dcfce7") - 1 == sum(min(r["accepted"], r["committed"]) for r in t["rounds"])  # + legend
    assert page.count("line-through") - 2 == sum(len(r["draft"]) - r["accepted"] for r in t["rounds"])


def test_round_detail_defaults_to_the_last_rejection(trace):
    rejected = [r["round"] for r in trace["rounds"] if r["resampled"]]
    assert default_round(trace) == (rejected[-1] if rejected else trace["rounds"][-1]["round"])
    fig = views(trace, round_index=0)[1].figure
    r = trace["rounds"][0]
    target_bar = fig.data[0]
    assert list(target_bar.y) == [d["p_target"] for d in r["draft"]]
    assert f"round 0: kept {r['accepted']} of {r['gamma']}" in fig.layout.title.text


def test_accepted_lengths_histogram(trace):
    fig = views(trace)[2].figure
    counts = list(fig.data[0].y)
    drafted = [r for r in trace["rounds"] if r["gamma"] > 0]
    assert sum(counts) == len(drafted)
    assert counts[drafted[0]["accepted"]] >= 1


def test_expected_speedup_formula():
    # Leviathan et al. 2022, section 3.3: alpha = 0.8, gamma = 5, c = 0.05 gives about 3.0x.
    assert expected_speedup(0.8, 5, 0.05) == pytest.approx((1 - 0.8**6) / (0.2 * 1.25))
    assert expected_speedup(1.0, 3, 0.0) == 4.0  # every draft kept, free draft: gamma + 1 tokens a pass
    assert expected_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)
    assert expected_speedup(0.5, 2, 0.0, verify_cost=1.75) == pytest.approx(1.75 / 1.75)


def test_speed_view_without_a_baseline(trace):
    t = copy.deepcopy(trace)
    t["speculative"]["baseline"] = None
    assert views(t)[3].html and "measure_baseline" in views(t)[3].html


def test_charts_import_no_torch():
    code = "import sys, playground.charts_speculative; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent).returncode == 0
