"""The What-if tab's handlers, without a browser; and the tab on the built page."""
import pytest

from playground.errors import InvalidRequest
from playground.ui.branches import branch_html
from playground.ui.whatif import sample_many_view, score_view, select_score_step
from playground.whatif.branches import branch_forced, branch_settings


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
