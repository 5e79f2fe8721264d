"""The tree of branches (playground.whatif.branches) on hand-made traces, and on toy runs through the engine."""
from __future__ import annotations

import pytest

from playground.errors import InvalidRequest
from playground.whatif import branches
from strategies.forcing import parse_path


def trace(ids, forced=(), seed=0, strategy="sampling", text=None):
    """A trace dict with the fields the tree reads: tokens, steps (forced flags), the run's settings."""
    return {"model": "toy", "strategy": strategy, "params": {"temperature": 1.0}, "seed": seed, "prompt": "1 2",
            "prompt_ids": [15, 1, 2], "text": text or " ".join(map(str, ids)),
            "tokens": [{"id": i, "text": f" {i}"} for i in ids],
            "steps": [{"forced": True} if k in forced else {} for k in range(len(ids))]}


def test_path_text_and_parse_path_round_trip_and_refuse_with_the_item():
    assert branches.path_text({3: 12, 0: 9}) == "0:9,3:12"
    assert parse_path("0:9, 3:the") == {0: 9, 3: "the"}
    assert parse_path("") == {} and parse_path(None) == {}
    for bad in ("x:9", "0", "0:", "-1:3"):
        with pytest.raises(InvalidRequest) as err:
            parse_path(bad)
        assert repr(bad.strip()) in str(err.value)


def test_a_branch_joins_its_parent_and_a_rerun_of_a_path_replaces_its_trace():
    root = trace([1, 2, 3])
    tree = branches.record(None, root)
    assert tree == {"nodes": [{"path": {}, "trace": root, "parent": None}], "current": 0}
    child = trace([1, 9, 4], forced={1})
    tree = branches.record(tree, child)
    assert [n["parent"] for n in tree["nodes"]] == [None, 0] and tree["current"] == 1
    grandchild = trace([1, 9, 4, 7], forced={1, 3})
    tree = branches.record(tree, grandchild)
    assert [n["parent"] for n in tree["nodes"]] == [None, 0, 1] and tree["current"] == 2
    # Generate again without forced tokens: the root, with its newest trace, the tree unchanged
    again = trace([1, 2, 3], text="again")
    tree = branches.record(tree, again)
    assert tree["current"] == 0 and len(tree["nodes"]) == 3 and tree["nodes"][0]["trace"]["text"] == "again"
    # a branch made from the root while the root is current hangs under the root
    tree = branches.record(tree, trace([5, 5], forced={0}))
    assert tree["nodes"][3]["parent"] == 0


def test_a_run_recorded_after_its_branch_becomes_the_root_above_it():
    """A bar click the moment a run finishes can record the branch before the run itself: the run then
    goes in as the root, above the branch, and the branch stays current (the tree a slower click makes)."""
    root, child, grandchild = trace([1, 2, 3]), trace([1, 9, 4], forced={1}), trace([1, 9, 4, 7], forced={1, 3})
    late = branches.record(branches.record(branches.record(None, child), grandchild), root)
    in_order = branches.record(branches.record(branches.pick(branches.record(branches.record(None, root), child), 1),
                                               grandchild), root)
    assert [n["path"] for n in late["nodes"]] == [{}, {1: 9}, {1: 9, 3: 7}]
    assert [n["parent"] for n in late["nodes"]] == [None, 0, 1] and late["current"] == 2
    assert [n["path"] for n in in_order["nodes"]] == [n["path"] for n in late["nodes"]]
    assert [n["parent"] for n in in_order["nodes"]] == [n["parent"] for n in late["nodes"]]


def test_a_run_with_other_settings_starts_a_new_tree():
    tree = branches.record(branches.record(None, trace([1, 2])), trace([1, 9], forced={1}))
    other = branches.record(tree, trace([1, 2], seed=1))
    assert len(other["nodes"]) == 1 and other["nodes"][0]["trace"]["seed"] == 1
    # a path that holds no node's path (a link restored with forced tokens, then another path): new tree
    linked = branches.record(None, trace([4, 2], forced={0}))
    assert len(branches.record(linked, trace([5, 2], forced={0}))["nodes"]) == 1


def test_parent_is_the_deepest_node_whose_path_the_run_holds_when_the_current_one_does_not():
    tree = branches.record(None, trace([1, 2, 3]))
    tree = branches.record(tree, trace([1, 9, 4], forced={1}))
    tree = branches.record(tree, trace([8, 2, 3], forced={0}))
    assert tree["current"] == 2
    tree = branches.record(tree, trace([1, 9, 6], forced={1, 2}))  # holds node 1's path, not node 2's
    assert tree["nodes"][3]["parent"] == 1


def test_undo_removes_the_branch_and_its_descendants_and_selects_the_parent():
    tree = branches.record(None, trace([1, 2, 3]))
    tree = branches.record(tree, trace([1, 9, 4], forced={1}))
    tree = branches.record(tree, trace([1, 9, 4, 7], forced={1, 3}))
    tree = branches.pick(tree, 0)
    tree = branches.record(tree, trace([6, 2], forced={0}))
    tree = branches.pick(tree, 1)
    undone = branches.undo(tree)
    assert [n["path"] for n in undone["nodes"]] == [{}, {0: 6}] and undone["current"] == 0
    assert [n["parent"] for n in undone["nodes"]] == [None, 0]
    with pytest.raises(InvalidRequest, match="no parent"):
        branches.undo(undone)
    with pytest.raises(InvalidRequest, match="no branch to undo"):
        branches.undo(None)


def test_pick_refuses_an_index_out_of_range_with_the_range():
    tree = branches.record(None, trace([1]))
    with pytest.raises(InvalidRequest, match=r"branch must be an integer in \[0, 0\], got 3"):
        branches.pick(tree, 3)


def test_labels_list_the_tree_depth_first_with_the_step_and_token_of_each_branch():
    tree = branches.record(None, trace([1, 2, 3]))
    tree = branches.record(tree, trace([1, 9, 4], forced={1}))
    tree = branches.pick(tree, 0)
    tree = branches.record(tree, trace([6, 2, 3], forced={0}))
    tree = branches.pick(tree, 1)
    tree = branches.record(tree, trace([1, 9, 4, 5], forced={1, 3}))
    labels = branches.labels(tree)
    assert [i for _, i in labels] == [0, 1, 3, 2]
    assert labels[0][0].startswith("run: ")
    assert labels[1][0].startswith("└ step 1 → ' 9'") and labels[2][0].startswith(branches.INDENT + "└ step 3 → ' 5'")
    assert branches.parent_of(tree)[2] == 3


def test_the_tree_keeps_at_most_max_branches_dropping_old_leaves_off_the_current_line():
    tree = branches.record(None, trace([1, 2]))
    for t in range(2, branches.MAX_BRANCHES + 4):
        tree = branches.pick(tree, 0) if t % 2 else tree
        tree = branches.record(tree, trace([t, 2], forced={0}) if t % 2 else trace([1, t], forced={1}))
    assert len(tree["nodes"]) == branches.MAX_BRANCHES
    node = tree["nodes"][tree["current"]]
    assert node["trace"]["tokens"][0]["id"] == branches.MAX_BRANCHES + 3  # the newest run is kept, current
    assert tree["nodes"][0]["parent"] is None


def test_a_branch_of_a_toy_run_through_the_engine_records_its_forced_step(store):
    from playground.engine import Request, run

    parent = run(store, Request("toy", "sampling", "1 2", {"temperature": 2.0}, seed=3, max_new_tokens=6)).to_dict()
    tree = branches.record(None, parent)
    other = next(c["id"] for c in parent["steps"][2]["candidates"] if c["id"] != parent["tokens"][2]["id"])
    settings = branches.branch_settings(parent, 2, other)
    assert settings["seed"] == 3 and settings["dtype"] == parent["dtype"] and settings["params"] == parent["params"]
    child = run(store, Request(**settings, max_new_tokens=6)).to_dict()
    assert [t["id"] for t in child["tokens"][:2]] == [t["id"] for t in parent["tokens"][:2]]  # replayed
    tree = branches.record(tree, child)
    assert tree["nodes"][1]["path"] == {2: other} and branches.parent_of(tree)[2] == 2
    # a branch of the branch keeps its forced step before the new one
    assert len(child["tokens"]) > 3 and branches.branch_forced(child, 3, "5") == {2: other, 3: "5"}
    assert branches.branch_forced(child, 2, "5") == {2: "5"}
