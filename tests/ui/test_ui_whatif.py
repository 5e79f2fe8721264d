"""The What-if tab's handlers, without a browser; and the tab on the built page."""
import json
import math

import pytest
from page_events import call

from playground.charts.common import show_token
from playground.charts.whatif import sample_figure
from playground.engine import Request
from playground.errors import InvalidRequest
from playground.ui.branches import branch_html
from playground.ui.page import build_demo
from playground.ui.whatif import sample_many_view, score_view, select_score_step
from playground.whatif.branches import branch_forced, branch_settings
from playground.whatif.sample_many import sample_many


def test_sample_many_view_draws_both_sets_of_bars(store):
    fig, table, result = sample_many_view(store, "toy", "sampling", "1 2", {}, 0, 300, 2)
    names = [t.name for t in fig.data]
    assert names == ["sampled (300 seeds)", "exact probability"]
    sampled, exact = fig.data
    assert list(sampled.x[:2]) == ["·a·time", "·the·hill"] and exact.y[0] == pytest.approx(0.70, abs=0.02)
    assert sampled.y[0] == result["outcomes"][0]["frequency"] and "chi-square p" in fig.layout.title.text
    assert "<table" in table and "·a·time" in table


def test_score_view_selects_the_most_surprising_token_and_its_step_charts(store):
    text_html, table, trace, step, figs = score_view(store, "toy", "once upon the hill")
    assert step == 1 and trace["tokens"][1]["text"] == " the"  # the 30% branch is the surprise
    assert 'data-step="1"' in text_html and "perplexity" in table and len(figs) == 3
    again = select_score_step(trace, 0)
    assert again is not None and "pg-sel" in again[0]


def test_branch_forces_the_parents_path_and_the_clicked_token(store):
    from playground.engine import Request, run

    parent = run(store, Request(model="toy", strategy="greedy", prompt="1 2", max_new_tokens=6)).to_dict()
    assert branch_forced(parent, 1, "9") == {1: "9"}  # the steps before it replay the parent's choices
    child = run(store, Request(**branch_settings(parent, 0, "the"), max_new_tokens=6)).to_dict()
    assert child["text"].startswith("the hill rose high") and child["steps"][0]["forced"] is True
    assert "would have taken ·a" in branch_html(parent, child, 0)


@pytest.mark.parametrize("args, message", [
    (({"tokens": []}, 0, "the"), "generate a run first"),
    (({"tokens": [{"id": 3}]}, 4, "the"), "step must be an integer in [0, 0], got 4"),
    (({"tokens": [{"id": 3}]}, 0, ""), "token must be a token id or text"),
])
def test_branch_input_errors(args, message):
    with pytest.raises(InvalidRequest) as err:
        branch_forced(*args)
    assert message in str(err.value)


def test_the_page_has_the_what_if_tab_and_the_branches_panel(store):
    from playground.ui.page import build_demo

    demo = build_demo(store)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"pg-whatif-sample", "pg-whatif-score", "pg-whatif-bars", "pg-branch-tree", "pg-branch-undo", "pg-forced",
            "pg-branch-run"} <= ids
    names = {d.get("api_name") for d in demo.config["dependencies"]}
    assert {"sample_many", "score", "branch"} <= names


def test_the_sample_many_tab_offers_the_whole_result_as_json_after_a_run(store):
    """The page's own Sample-many handler, called with the page's inputs: after the run, the tab's file holds
    the result with every outcome (the table shows 30 and says the rest are in the JSON)."""
    demo = build_demo(store)
    fn = next(f for f in demo.fns.values() if f.api_name == "sample_many")
    set_to = {"pg-model": "toy", "pg-strategy": "sampling", "pg-prompt": "1 2", "pg-seed": 0,
              "pg-p-temperature": 3.0, "pg-whatif-n": 200, "pg-whatif-k": 3}
    frames = list(call(fn, lambda c: set_to.get(c.elem_id, c.value)))
    by_id = {getattr(c, "elem_id", None): v for c, v in frames[-1].items()}
    path = by_id["pg-whatif-file"]
    assert path and path.endswith(".json")
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    assert (saved["n"], saved["strategy"], saved["params"]["temperature"]) == (200, "sampling", 3.0)
    assert sum(o["count"] for o in saved["outcomes"]) == 200
    run = sample_many(store, Request("toy", "sampling", "1 2", {"temperature": 3.0}, seed=0, max_new_tokens=3), 200)
    assert [(o["ids"], o["count"], o["probability"]) for o in saved["outcomes"]] == \
        [(o["ids"], o["count"], o["probability"]) for o in run["outcomes"]]
    assert len(saved["outcomes"]) > 30, "the run has more outcomes than the table shows"
    assert f"{len(saved['outcomes']) - 30} more outcomes in the JSON" in by_id["pg-whatif-table"]
    demo.close()


def test_the_rest_bar_carries_the_exact_mass_of_every_outcome_not_among_the_bars(store):
    """The sampled bar counts every draw outside the bars; the exact bar beside it is the same event's exact
    mass, 1 minus the bars' (outcomes never drawn and below the enumeration's floor included), not the sum
    of the recorded outcomes alone, which left most of it out."""
    fig, _, result = sample_many_view(store, "toy", "sampling", "1 2", {"temperature": 3.0}, 0, 200, 3)
    sampled, exact = fig.data
    shown_labels = set(sampled.x[:-1])
    listed = [o for o in result["outcomes"] if "".join(show_token(p) for p in o["pieces"]) in shown_labels]
    left_out = [o for o in result["outcomes"] if o not in listed]
    mass = 1.0 - math.fsum(o["probability"] for o in listed)
    recorded = math.fsum(o["probability"] for o in left_out)
    assert len(left_out) > 0 and mass > recorded * 1.01, "the toy at temperature 3 has unrecorded mass"
    assert exact.y[-1] == pytest.approx(mass, rel=1e-12)
    assert sampled.y[-1] == pytest.approx(sum(o["frequency"] for o in left_out))
    assert sampled.x[-1] == f"every other outcome ({len(left_out)} more recorded) · exact {mass:.4g}"
    assert f"exact mass {mass:.6g}: every outcome not among the bars" in exact.customdata[-1]
    # the two bars measure one event: far apart only by sampling noise (200 draws)
    assert abs(sampled.y[-1] - exact.y[-1]) < 0.15


def test_without_an_exact_reference_the_rest_bar_says_it_sums_its_drawn_outcomes_alone(store):
    _, _, result = sample_many_view(store, "toy", "sampling", "1 2", {"temperature": 3.0}, 0, 200, 3)
    result["reference"] = "none (no exact enumeration for this strategy)"
    sampled, exact = sample_figure(result).data
    left_out = sorted(result["outcomes"], key=lambda o: (-max(o["frequency"], o["probability"] or 0.0), o["ids"]))[20:]
    recorded = math.fsum(o["probability"] for o in left_out)
    assert exact.y[-1] == pytest.approx(recorded) and f"these summed {recorded:.4g}" in exact.x[-1]
    assert "drawn outcomes alone" in exact.customdata[-1]


def test_the_rest_bar_says_not_enumerated_where_an_outcome_it_sums_has_no_probability(store):
    _, _, result = sample_many_view(store, "toy", "sampling", "1 2", {"temperature": 3.0}, 0, 200, 3)
    result["outcomes"][0]["probability"] = None  # a record whose likeliest outcome has no exact probability
    sampled, exact = sample_figure(result).data
    assert exact.y[-1] is None and "not enumerated" in exact.x[-1] and "not enumerated" in exact.customdata[-1]


def test_sample_many_and_score_run_the_pages_weights_and_say_which(store):
    """The page's own Sample-many and Score handlers, called with the page's inputs and Weights at bfloat16:
    both run the toy in bfloat16 (as Generate would), not Request's float32 default, and each view names the
    weights that ran."""
    demo = build_demo(store)
    set_to = {"pg-model": "toy", "pg-strategy": "sampling", "pg-prompt": "1 2", "pg-seed": 0, "pg-dtype": "bfloat16",
              "pg-whatif-n": 20, "pg-whatif-k": 2, "pg-whatif-text": "3 4 5"}
    by_api = {}
    for name in ("sample_many", "score"):
        fn = next(f for f in demo.fns.values() if f.api_name == name)
        frames = list(call(fn, lambda c: set_to.get(getattr(c, "elem_id", None), c.value)))
        by_api[name] = {getattr(c, "elem_id", None): v for c, v in frames[-1].items()}
    demo.close()
    with open(by_api["sample_many"]["pg-whatif-file"], encoding="utf-8") as f:
        assert json.load(f)["dtype"] == "bfloat16"
    assert "toy in bfloat16 weights" in by_api["sample_many"]["pg-whatif-table"]
    assert by_api["score"]["pg-whatif-summary"].count("toy in bfloat16 weights") == 1
    assert by_api["score"]["pg-whatif-tokens"]  # the text was scored
