"""The EAGLE views draw the recorded tree: one marker per node in the colour of its recorded fate,
the accepted path's edges bold, and tau per round as recorded."""
from __future__ import annotations

import pytest

from playground.charts.common import show_token
from playground.charts.eagle import FATES, tau_figure, tree_figure, views
from playground.charts.views import strategy_views
from playground.engine import Request, run


@pytest.fixture(scope="module")
def trace(store) -> dict:
    params = {"draft": "eagle", "temperature": 1.5, "eagle_depth": 3, "eagle_branching": 2}
    return run(store, Request("toy", "speculative", "once upon", params, seed=3, max_new_tokens=12)).to_dict()


def test_tree_markers_are_the_recorded_fates(trace):
    for r in trace["rounds"]:
        fig = tree_figure(trace, r["round"])
        drawn = {t.name: len(t.x) for t in fig.data if t.name in FATES}
        recorded = {f: sum(n["fate"] == f for n in r["tree"]) for f in FATES}
        assert drawn == {f: c for f, c in recorded.items() if c}
        bold = [t for t in fig.data if t.mode == "lines" and t.line.width == 4]
        assert len(bold) == r["accepted"]
        assert fig.data[-1].text[-1] == show_token(r["next"]["text"])  # "·" for a space, escaped for plotly


def test_tau_bars_are_the_recorded_taus(trace):
    fig = tau_figure(trace)
    assert list(fig.data[0].y) == trace["speculative"]["taus"]
    assert sum(trace["speculative"]["taus"]) >= len(trace["tokens"])


def test_only_eagle_views_for_an_eagle_trace(trace):
    titles = [v.title for v in strategy_views(trace)]
    assert "EAGLE draft tree" in titles and "speculative rounds" not in titles
    assert views({"rounds": [], "speculative": {}}) == []
