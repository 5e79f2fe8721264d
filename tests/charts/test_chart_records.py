"""The cases of the 'charts draw the decoder's own record' issue, on toy: every line sits at the value
the stage recorded, over the distribution that stage received, and every colour is a recorded kept
flag. Expected values are computed here from the toy's logits with plain torch."""
from __future__ import annotations

import pytest
import torch
from figure_reading import (
    bar_points,
    fig_dict,
    is_horizontal,
    is_vertical,
    stage_points,
    stage_shapes,
    waterfall_panels,
)

from playground.charts.common import show_token
from playground.charts.distribution import distribution_figure
from playground.charts.palette import CUT, KEPT
from playground.charts.text import token_html
from playground.charts.waterfall import waterfall_figure
from playground.engine import Request, run


def raw_logits(toy, prompt: str) -> torch.Tensor:
    with torch.no_grad():
        return toy.forward(torch.tensor([toy.encode(prompt)])).logits[0, -1].float()


def penalised(logits: torch.Tensor, seen: list[int], penalty: float) -> torch.Tensor:
    out = logits.clone()
    ids = torch.tensor(sorted(set(seen)))
    out[ids] = torch.where(out[ids] < 0, out[ids] * penalty, out[ids] / penalty)
    return out


def step0(store, prompt: str, params: dict) -> dict:
    return run(store, Request("toy", "sampling", prompt, params, seed=0, max_new_tokens=1)).to_dict()


def stage(step: dict, name: str) -> dict:
    return next(s for s in step["stages"] if s["name"] == name)


def test_min_p_line_is_the_threshold_min_p_used_on_its_own_input(store, toy):
    """Order top_k,temperature,...,min_p: min-p sees the T=0.3 distribution, so the threshold is
    0.1 x 0.944 = 0.094, and ' the' (0.056 there, 0.30 for the model) is below it and cut."""
    trace = step0(store, "1 2", dict(order="top_k,temperature,penalty,top_p,min_p", top_k=16, temperature=0.3,
                                     min_p=0.1))
    s = trace["steps"][0]
    into_min_p = (raw_logits(toy, "1 2") / 0.3).softmax(-1)  # top_k 16 keeps the whole toy vocabulary
    decision = stage(s, "min_p")["decision"]
    assert decision["threshold"] == pytest.approx(0.1 * float(into_min_p.max()), rel=1e-5)
    assert decision["threshold"] == pytest.approx(0.0944, abs=5e-4)

    fd = fig_dict(distribution_figure(trace, 0))
    [line] = stage_shapes(fd, "min_p")
    assert is_horizontal(line) and line["y0"] == decision["threshold"]
    points = stage_points(fd, "min_p", "input")
    assert points is not None, "min-p's input is not the bars here: it must be drawn"
    the = toy.encode(" the")[-1]
    assert points[the]["y"] == pytest.approx(float(into_min_p[the]), abs=1e-6)
    assert points[the]["y"] < line["y0"]
    assert bar_points(fd)[the]["color"] == CUT
    for tok, pt in points.items():
        assert (pt["y"] >= line["y0"]) == stage(s, "min_p")["kept"][_index(s, tok)]


def test_top_k_mark_separates_the_token_top_k_kept(store, toy):
    """Order min_p,penalty,top_k: the bars are the model's own distribution, where ' a' leads; the
    penalty (4, ' a' already in the text) hands the lead to ' the', which top_k 1 keeps."""
    prompt = "1 2 3 1 2"
    trace = step0(store, prompt, dict(order="min_p,penalty,top_k,temperature,top_p", repetition_penalty=4,
                                      top_k=1, min_p=0.05))
    s = trace["steps"][0]
    a, the = toy.encode(" a")[-1], toy.encode(" the")[-1]
    into_top_k = penalised(raw_logits(toy, prompt), toy.encode(prompt), 4.0)
    into_top_k = into_top_k.masked_fill(raw_logits(toy, prompt).softmax(-1) < 0.05 * raw_logits(toy, prompt)
                                        .softmax(-1).max(), float("-inf")).softmax(-1)
    assert stage(s, "top_k")["kept"][_index(s, the)] and not stage(s, "top_k")["kept"][_index(s, a)]
    decision = stage(s, "top_k")["decision"]
    assert decision["k"] == 1 and decision["cut_prob"] == pytest.approx(float(into_top_k[the]), rel=1e-5)

    fd = fig_dict(distribution_figure(trace, 0))
    bars = bar_points(fd)
    assert bars[a]["x"] < bars[the]["x"]  # the bars still rank ' a' first
    [mark] = stage_shapes(fd, "top_k")
    points = stage_points(fd, "top_k", "input")
    if is_vertical(mark):  # a rank cut: only where the bars are top-k's input
        assert points is None
        kept_left = {tok for tok, b in bars.items() if b["x"] < mark["x0"]}
    else:
        assert is_horizontal(mark) and mark["y0"] == decision["cut_prob"] and points is not None
        kept_left = {tok for tok, pt in points.items() if pt["y"] >= mark["y0"]}
    assert kept_left == {the}
    assert bars[the]["color"] == KEPT and bars[a]["color"] == CUT


def test_cumulative_curve_is_top_p_s_own_running_mass(store, toy):
    """Order top_k,penalty,top_p: top-p ranks by the penalised distribution (' the' 0.978 first), not
    by the bars (the model's own, ' a' first). Each point is the mass top-p had summed up to and
    including that token; top-p kept exactly the tokens whose mass before them was below p."""
    prompt = "1 2 3 1 2"
    trace = step0(store, prompt, dict(order="top_k,penalty,top_p,temperature,min_p", top_k=16,
                                      repetition_penalty=4, top_p=0.95))
    s = trace["steps"][0]
    into_top_p = penalised(raw_logits(toy, prompt), toy.encode(prompt), 4.0).softmax(-1)
    fd = fig_dict(distribution_figure(trace, 0))
    curve = stage_points(fd, "top_p", "cumulative")
    assert curve is not None
    [line] = stage_shapes(fd, "top_p")
    assert is_horizontal(line) and line["yref"] == "y2" and line["y0"] == 0.95
    for tok, pt in curve.items():
        mass = float(into_top_p[into_top_p >= into_top_p[tok]].sum())
        assert pt["y"] == pytest.approx(mass, abs=1e-5)
        kept = stage(s, "top_p")["kept"][_index(s, tok)]
        assert kept == (pt["y"] - float(into_top_p[tok]) < 0.95)
    a = toy.encode(" a")[-1]
    assert curve[a]["y"] > 0.95 and not stage(s, "top_p")["kept"][_index(s, a)]


def test_the_top_p_line_is_labelled_on_the_cumulative_axis_and_a_cut_past_the_bars_is_said(store):
    """Top-p's line is drawn on the cumulative (right) axis and labelled there, as one of its ticks (a label
    in the plot by the left axis read as a probability); where top-p kept every bar shown and more, the
    chart says after which token its cut falls."""
    trace = step0(store, "1 2", {"temperature": 3.0, "top_p": 0.9})
    kept = stage(trace["steps"][0], "top_p")["kept_count"]
    assert kept > 3
    fig = distribution_figure(trace, 0, top=3)
    axis = fig.layout.yaxis2
    at = dict(zip(axis.tickvals, axis.ticktext))
    assert "top-p 0.9" in at[0.9] and at[0.75] == "75%" and at[1.0] == "100%"
    assert not any((a.text or "").startswith("top-p") for a in fig.layout.annotations)  # not written in the plot
    notes = {a.name: a for a in fig.layout.annotations}
    assert f"after token {kept}, past the 3 bars shown" in notes["top_p cut"].text
    everything = {a.name for a in distribution_figure(trace, 0, top=20).layout.annotations}
    assert "top_p cut" not in everything  # the cut is among the bars
    plain = distribution_figure(step0(store, "1 2", {"temperature": 3.0}), 0).layout.yaxis2
    assert list(plain.tickvals) == [0, 0.25, 0.5, 0.75, 1.0] and list(plain.ticktext)[-1] == "100%"


def test_waterfall_colours_are_the_kept_flags_not_zero_probabilities(store):
    """At T=0.05 float32 softmax underflows to 0 for most tokens, yet temperature removes nothing."""
    trace = step0(store, "1 2", {"temperature": 0.05})
    s = trace["steps"][0]
    temp = stage(s, "temperature")
    assert all(temp["kept"]) and temp["kept_count"] == 16
    assert sum(p == 0 for p in temp["probs"]) >= 10  # the underflow the flags must not be read from
    panels = waterfall_panels(fig_dict(waterfall_figure(trace, 0)))
    assert [p["name"] for p in panels] == ["raw", "temperature"]
    for panel in panels:
        flags = stage(s, panel["name"])["kept"]
        assert panel["colors"] == [KEPT if flags[_index(s, tok)] else CUT for tok in panel["ids"]]


def _index(step: dict, token_id: int) -> int:
    return next(i for i, c in enumerate(step["candidates"]) if c["id"] == token_id)


def test_a_forced_step_is_drawn_as_forced_with_the_strategy_s_own_pick(store):
    """Toy greedy with " the" forced at step 0: the text marks the token, the distribution labels the
    forced bar and the bar greedy would have taken, as the trace recorded them."""
    trace = run(store, Request("toy", "greedy", "1 2", forced={0: "the"}, max_new_tokens=4)).to_dict()
    step = trace["steps"][0]
    assert step["forced"] is True and step["strategy_choice_text"] == " a"
    fig = distribution_figure(trace, 0)
    notes = {a.text: a.x for a in fig.layout.annotations}
    ticks = list(fig.layout.xaxis.ticktext)
    assert ticks[int(notes["forced"])] == show_token(" the")
    assert ticks[int(notes["strategy's pick"])] == show_token(" a")
    assert "forced <b>" in fig.layout.title.text and "would have taken" in fig.layout.title.text
    html = token_html(trace)
    assert html.count("pg-forced") == 1 and "the strategy would have taken ·a" in html
    plain = run(store, Request("toy", "greedy", "1 2", max_new_tokens=4)).to_dict()
    assert "pg-forced" not in token_html(plain)
    assert "chosen" in {a.text for a in distribution_figure(plain, 0).layout.annotations}
