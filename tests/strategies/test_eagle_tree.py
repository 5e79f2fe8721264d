"""The tree utilities on a three-node and a seven-node tree, every value written out by hand."""
from __future__ import annotations

import pytest
import torch

from strategies.speculative.eagle.tree import (
    ancestors_mask,
    attention_mask,
    children,
    depths,
    position_ids,
    retrieval_indices,
    select_best,
    static_tree,
    subtree,
)

THREE = [-1, 0, 0]  # the root and two alternative drafts
#        0
#      /   \
#     1     2
#    / \     \
#   3   4     6
#   |
#   5
SEVEN = [-1, 0, 0, 1, 1, 3, 2]


def test_three_node_tree():
    assert depths(THREE) == [0, 1, 1]
    assert ancestors_mask(THREE).int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 0, 1]]
    assert position_ids(THREE, past=5).tolist() == [[5, 6, 6]]
    assert retrieval_indices(THREE).tolist() == [[0, 1], [0, 2]]


def test_seven_node_tree():
    assert depths(SEVEN) == [0, 1, 1, 2, 2, 3, 2]
    assert ancestors_mask(SEVEN).int().tolist() == [
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [1, 1, 0, 0, 1, 0, 0],
        [1, 1, 0, 1, 0, 1, 0],
        [1, 0, 1, 0, 0, 0, 1]]
    assert position_ids(SEVEN, past=3).tolist() == [[3, 4, 4, 5, 5, 6, 5]]
    assert retrieval_indices(SEVEN).tolist() == [[0, 1, 4, -1], [0, 1, 3, 5], [0, 2, 6, -1]]
    assert children(SEVEN) == [[1, 2], [3, 4], [6], [5], [], [], []]


def test_attention_mask_opens_the_cache_and_the_own_path_only():
    mask = attention_mask(THREE, past=2)
    low = torch.finfo(torch.float32).min
    assert mask.shape == (1, 1, 3, 5)
    assert mask[0, 0].tolist() == [[0, 0, 0, low, low], [0, 0, 0, 0, low], [0, 0, 0, low, 0]]


def test_static_tree():
    assert static_tree(3, 1) == [-1, 0, 1, 2]  # a chain
    assert static_tree(2, 2) == [-1, 0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="depth and branching"):
        static_tree(0, 2)


def test_select_best_keeps_the_most_probable_nodes_as_a_tree():
    scores = [1.0, 0.6, 0.3, 0.5, 0.05, 0.4, 0.2]  # cumulative draft probabilities on SEVEN
    keep = select_best(SEVEN, scores, total=4)
    assert keep == [0, 1, 2, 3, 5]
    assert subtree(SEVEN, keep) == [-1, 0, 0, 1, 3]


def test_refusals():
    with pytest.raises(ValueError, match=r"parents\[2\] must be in \[0, 1\], got 2"):
        depths([-1, 0, 2])
    with pytest.raises(ValueError, match="outscores its parent"):
        select_best(THREE + [2], [1.0, 0.5, 0.1, 0.9], total=2)
