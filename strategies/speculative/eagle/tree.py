"""A draft tree as explicit data, and the small pure functions a tree verification pass needs.

A tree of N nodes is a parents array: ``parents[0] == -1`` is the root (the last committed token,
fed at the head of the verification pass as in chain speculative decoding), and every other node i
has ``0 <= parents[i] < i``, so the array is in topological order and a node's ancestors come
before it. Flattened in that order, the tree is verified in one target pass (SpecInfer, Miao et
al. 2023; Medusa, Cai et al. 2024; EAGLE, Li et al. 2024):

- ``attention_mask``: node i sees node j exactly when j is i or one of its ancestors, so each
  node's logits are those of its own root-to-node path;
- ``position_ids``: a node's position is the cache length plus its depth, the position it has
  on its path;
- ``retrieval_indices``: one row per leaf, the node indices of its root-to-leaf path.

Shapes come from the two builders: ``static_tree`` (every node to ``depth`` gets ``branching``
children; branching 1 is a chain) and ``select_best`` (EAGLE-2, Li et al. 2024, "EAGLE-2: Faster
Inference of Language Models with Dynamic Draft Trees": keep the ``total`` nodes with the highest
cumulative draft probability; a node's value never exceeds its parent's, so the kept set is a tree).
"""
from __future__ import annotations

import torch


def check_parents(parents: list[int]) -> None:
    """Refuse an array that is not a tree in topological order rooted at node 0."""
    if not parents or parents[0] != -1:
        raise ValueError(f"parents must start with -1 (the root), got {parents}")
    for i, p in enumerate(parents[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"parents[{i}] must be in [0, {i - 1}], got {p}")


def depths(parents: list[int]) -> list[int]:
    """Depth of each node (root 0)."""
    check_parents(parents)
    out = [0] * len(parents)
    for i in range(1, len(parents)):
        out[i] = out[parents[i]] + 1
    return out


def ancestors_mask(parents: list[int]) -> torch.Tensor:
    """[N, N] bool: ``mask[i, j]`` is True when node j is node i or one of its ancestors."""
    check_parents(parents)
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, i] = True
        if i:
            mask[i] |= mask[parents[i]]
    return mask


def attention_mask(parents: list[int], past: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[1, 1, N, past + N] additive mask for one pass over the flattened tree after ``past`` cached tokens.

    0 where attention is allowed (every cached token, and the node's own path), the dtype's lowest
    value elsewhere: the form both eager attention (added to the scores) and SDPA take, and that
    transformers passes through unchanged when it is 4D.
    """
    allowed = torch.cat([torch.ones(len(parents), past, dtype=torch.bool), ancestors_mask(parents)], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask[~allowed] = torch.finfo(dtype).min
    return mask[None, None]


def position_ids(parents: list[int], past: int) -> torch.Tensor:
    """[1, N] the position of each node on its own path: ``past`` + depth."""
    return (torch.tensor(depths(parents)) + past).unsqueeze(0)


def children(parents: list[int]) -> list[list[int]]:
    """The children of each node, in index order (the order siblings are verified in)."""
    out: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        out[p].append(i)
    return out


def leaves(parents: list[int]) -> list[int]:
    return [i for i, c in enumerate(children(parents)) if not c]


def path_to(parents: list[int], node: int) -> list[int]:
    """Node indices from the root to ``node``, both included."""
    path = [node]
    while parents[path[-1]] != -1:
        path.append(parents[path[-1]])
    return path[::-1]


def retrieval_indices(parents: list[int]) -> torch.Tensor:
    """[leaves, max depth + 1] long: each leaf's root-to-leaf node indices, padded with -1."""
    check_parents(parents)
    paths = [path_to(parents, leaf) for leaf in leaves(parents)]
    width = max(len(p) for p in paths)
    return torch.tensor([p + [-1] * (width - len(p)) for p in paths], dtype=torch.long)


def static_tree(depth: int, branching: int) -> list[int]:
    """Parents of the full tree where every node above ``depth`` has ``branching`` children, breadth first.

    1 + b + b^2 + ... + b^depth nodes; ``branching`` 1 is a chain of ``depth`` drafts.
    """
    if depth < 1 or branching < 1:
        raise ValueError(f"depth and branching must be >= 1, got {depth} and {branching}")
    parents, level = [-1], [0]
    for _ in range(depth):
        nxt = []
        for node in level:
            for _ in range(branching):
                parents.append(node)
                nxt.append(len(parents) - 1)
        level = nxt
    return parents


def select_best(parents: list[int], scores: list[float], total: int) -> list[int]:
    """EAGLE-2's reranking: the root and the ``total`` other nodes of highest ``scores``, in index order.

    ``scores`` are cumulative draft probabilities (products along the path), so a node never
    outscores its parent; ties go to the lower index, which is the earlier drawn node, so every kept
    node's parent is kept too. Returns the kept node indices (old numbering, root first).
    """
    check_parents(parents)
    if total < 1:
        raise ValueError(f"total must be >= 1, got {total}")
    order = sorted(range(1, len(parents)), key=lambda i: (-scores[i], i))
    keep = sorted([0] + order[:total])
    kept = set(keep)
    missing = [i for i in keep if i and parents[i] not in kept]
    if missing:
        raise ValueError(f"scores must not increase from parent to child; node {missing[0]} outscores its parent")
    return keep


def subtree(parents: list[int], keep: list[int]) -> list[int]:
    """The parents array of the nodes ``keep`` (ascending, closed under parents), renumbered 0..len-1."""
    new = {old: i for i, old in enumerate(keep)}
    return [-1] + [new[parents[old]] for old in keep[1:]]
