"""Tree verification on hand-made tables: greedy follows the target's argmax path; recursive rejection
sampling over siblings is lossless (chi-square on the first two committed tokens, with a decisive
control), whatever the draft."""
from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from strategies.speculative.eagle.tree import children, static_tree
from strategies.speculative.eagle.tree_verify import draw_children, greedy, sampling

V = 5
N = 12000
P_VALUE = 1e-3


def tables(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """target[t] and draft[t]: the next-token law after token t (a bigram model of each)."""
    g = torch.Generator().manual_seed(seed)
    target = torch.rand(V, V, generator=g).pow(3)
    draft = torch.rand(V, V, generator=g).pow(3)
    target[:, 4] = 0.0  # a token the target never emits, the draft does
    return target / target.sum(-1, keepdim=True), draft / draft.sum(-1, keepdim=True)


def with_replacement(probs: torch.Tensor, k: int, g: torch.Generator) -> list[int]:
    """Siblings drawn independently: not what the verifier's update of q assumes (a control)."""
    return [int(torch.multinomial(probs, 1, generator=g)) for _ in range(k)]


def draft_tree(parents: list[int], root: int, draft: torch.Tensor, g: torch.Generator, draw=draw_children
               ) -> list[int]:
    """Tokens of a static tree whose children are drawn by ``draw`` (without replacement) from the draft."""
    tokens = [root] + [0] * (len(parents) - 1)
    for node, kids in enumerate(children(parents)):
        drawn = draw(draft[tokens[node]], len(kids), g)
        for child, token in zip(kids, drawn):
            tokens[child] = token
    return tokens


def two_tokens(parents, root, target, draft, g, draw=draw_children) -> tuple[int, int]:
    tokens = draft_tree(parents, root, draft, g, draw)
    v = sampling(parents, tokens, target[tokens], draft[tokens], g)
    text = [tokens[i] for i in v.path] + [v.next_id]
    if len(text) == 1:  # the next round's first token comes from the target
        text.append(int(torch.multinomial(target[text[0]], 1, generator=g)))
    return text[0], text[1]


def test_greedy_takes_the_longest_agreeing_path():
    target = torch.tensor([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1], [0.3, 0.3, 0.4]])
    parents = [-1, 0, 0, 1, 2]  # root, two children, one grandchild each
    tokens = [0, 2, 1, 0, 2]
    rows = torch.stack([target[t] for t in tokens])
    v = greedy(parents, tokens, rows, torch.full_like(rows, 1 / 3))
    # root's argmax is 1 -> node 2; after token 1 the argmax is 2 -> node 4; after 2 the argmax is 0
    assert v.path == [2, 4] and v.next_id == 0
    assert v.evaluated == [False, True, True, False, True]
    assert v.accept_prob == [None, 0.0, 1.0, None, 1.0]


def counts_of(draw) -> np.ndarray:
    target, draft = tables(0)
    parents = static_tree(2, 3)
    g = torch.Generator().manual_seed(1)
    counts = np.zeros((V, V))
    for _ in range(N):
        a, b = two_tokens(parents, 0, target, draft, g, draw)
        counts[a, b] += 1
    return counts


def p_value(counts: np.ndarray, law: torch.Tensor) -> float:
    expected = law.double().numpy()
    mask = expected > 0
    assert counts[~mask].sum() == 0  # never a pair the law cannot produce
    return float(stats.chisquare(counts[mask], expected[mask] / expected[mask].sum() * N).pvalue)


def test_tree_sampling_is_lossless():
    target, draft = tables(0)
    counts = counts_of(draw_children)
    assert p_value(counts, target[0][:, None] * target) > P_VALUE
    # the same samples against the draft's law: decisively different
    wrong = (draft[0][:, None] * draft).double().numpy()
    mask = target[0][:, None] * target > 0
    _, p_wrong = stats.chisquare(counts[mask.numpy()], wrong[mask.numpy()] / wrong[mask.numpy()].sum() * N)
    assert p_wrong < 1e-12


def test_siblings_drawn_with_replacement_are_caught():
    """The verifier assumes siblings without replacement; fed independent draws it is biased, and
    the same test with the same sample size sees it."""
    target, _ = tables(0)
    assert p_value(counts_of(with_replacement), target[0][:, None] * target) < 1e-6


def test_draw_children_is_without_replacement():
    g = torch.Generator().manual_seed(0)
    drawn = draw_children(torch.tensor([0.5, 0.5, 0.0]), 3, g)
    assert sorted(drawn) == [0, 1]
