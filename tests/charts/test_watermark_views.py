"""The watermark's views (playground/charts/watermark.py) and the running count they draw: the stage's
z after the last step is the detector's on the prompt and the run's tokens, forced tokens included;
the z-score chart and the green-mass chart draw the stage's records and nothing else."""
import pytest

from playground.charts.palette import GREEN_LISTED, RED_LISTED
from playground.charts.views import strategy_views
from playground.charts.watermark import (
    REPEATS_CAVEAT,
    THRESHOLD,
    detection_html,
    mass_figure,
    records,
    synthid_figure,
    views,
    z_figure,
)
from playground.engine import Request, run
from strategies.watermark_detect import detect


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
@pytest.mark.parametrize("forced", [{}, {2: 9}])
def test_the_running_count_ends_at_the_detectors_z(store, toy, scheme, forced):
    trace = run(store, Request("toy", "sampling", "1 2", {"watermark_delta": 3.0, "watermark_scheme": scheme,
                                                          "watermark_gamma": 0.5}, seed=4, max_new_tokens=8,
                               forced=forced)).to_dict()
    recs = records(trace)
    assert len(recs) == len(trace["tokens"]) >= 5  # the toy may end at its end-of-text token
    # the text's tokens: an end-of-text token is no part of the text and is not scored
    text = [t["id"] for t in trace["tokens"] if t["id"] not in toy.eos_ids]
    found = detect(trace["prompt_ids"] + text, toy.vocab_size, 0.5, scheme=scheme, context=len(trace["prompt_ids"]))
    last = recs[-1][2]
    assert (last["scored"], last["green_count"]) == (found.scored, found.green)
    assert last["z"] == pytest.approx(found.z, rel=1e-5)
    # every step's count is the detector's on the text so far
    for k, (_, _, d) in enumerate(recs):
        so_far = detect(trace["prompt_ids"] + text[:k + 1], toy.vocab_size, 0.5, scheme=scheme,
                        context=len(trace["prompt_ids"]))
        assert d["green_count"] == so_far.green
        assert k >= len(text) or d["chosen_green"] == bool(so_far.marks[-1].green)


def test_the_charts_draw_the_records(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"watermark_delta": 2.0}, seed=7,
                               max_new_tokens=10)).to_dict()
    recs = records(trace)
    fig = z_figure(trace, recs, selected=3)
    line = fig.data[0]
    assert list(line.y) == [d["z"] for _, _, d in recs] and list(line.x) == list(range(len(trace["tokens"])))
    assert list(line.marker.color) == [GREEN_LISTED if d["chosen_green"] else RED_LISTED for _, _, d in recs]
    assert any(s.type == "line" and s.y0 == THRESHOLD == s.y1 for s in fig.layout.shapes)
    assert f"after {len(recs)} tokens" in fig.layout.title.text
    assert f"{recs[-1][2]['green_count']} green of {recs[-1][2]['scored']} scored" in fig.layout.annotations[-1].text
    mass = mass_figure(trace, recs)
    after = next(t for t in mass.data if t.name.startswith("after"))
    assert list(after.x) == [s["raw_entropy"] for _, s, _ in recs]
    assert list(after.y) == [d["green_mass_after"] for _, _, d in recs]
    before = next(t for t in mass.data if t.name.startswith("green mass before"))
    assert list(before.y) == [d["green_mass_before"] for _, _, d in recs]
    assert [v.title for v in views(trace, 3)] == ["Watermark z-score", "Watermark and entropy"]
    assert "Watermark z-score" in [v.title for v in strategy_views(trace, 3)]


def test_no_watermark_no_views(store):
    trace = run(store, Request("toy", "sampling", "1 2", {}, seed=7, max_new_tokens=4)).to_dict()
    assert records(trace) == [] and views(trace) == []


def test_the_synthid_view_draws_its_records(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"synthid_keys": "1,2,3,4"}, seed=1,
                               max_new_tokens=10)).to_dict()
    recs = records(trace, "synthid")
    assert len(recs) == len(trace["tokens"]) and records(trace) == []
    fig = synthid_figure(trace, recs)
    mean = next(t for t in fig.data if t.name == "mean score")
    assert list(mean.y) == [d["mean"] for _, _, d in recs]
    weighted = next(t for t in fig.data if t.name == "weighted mean")
    assert list(weighted.y) == [d["weighted_mean"] for _, _, d in recs]
    points = next(t for t in fig.data if t.name == "the token's mean g-value")
    assert list(points.y) == [d["chosen_g_mean"] for _, _, d in recs]
    assert list(points.marker.symbol) == ["circle" if d["counted"] else "circle-open" for _, _, d in recs]
    assert [v.title for v in views(trace)] == ["SynthID scores"]


def test_the_what_if_detection_names_its_numbers_and_colours_the_tokens(store):
    from playground.ui.whatif import watermark_view
    from playground.whatif.watermark import detect_synthid_text, detect_text
    params = {"watermark_delta": 3.0, "watermark_gamma": 0.5}
    trace = run(store, Request("toy", "sampling", "1 2", params, seed=4, max_new_tokens=8)).to_dict()
    html = watermark_view(store, "toy", trace["text"], params, "1 2")
    found = detect_text(store, "toy", trace["text"], "1 2", gamma=0.5)
    assert f"z = <b>{found['z']:.2f}</b>" in html and f"{found['green']} green of {found['scored']} scored" in html
    assert html.count(GREEN_LISTED) == found["green"]
    assert html.count(RED_LISTED) == found["scored"] - found["green"]
    keys = {"synthid_keys": "5,6,7"}
    html = watermark_view(store, "toy", "a time there lived happily ever", keys)
    found = detect_synthid_text(store, "toy", "a time there lived happily ever", "5,6,7")
    assert f"mean g-value <b>{found['mean']:.3f}</b>" in html
    assert html.count("not scored") == sum(1 for m in found["marks"] if not m["counted"])


def test_the_detection_warns_of_repeats_where_it_counts_each_repeat_again():
    """A repeated text can pass z = 4 unwatermarked; the verdict says so unless each pair was counted once."""
    result = dict(z=22.2, p_value=1e-9, green=900, scored=1000, green_fraction=0.9, gamma=0.25, scheme="lefthash",
                  key=15485863, marks=[{"text": "a", "green": True}])
    assert REPEATS_CAVEAT in detection_html(result)
    assert REPEATS_CAVEAT not in detection_html(dict(result, ignore_repeated_ngrams=True))
