"""Verification of a draft tree: pure functions of (target probs, draft probs, tree, generator).

Shapes (N tree nodes in the order of ``strategies.speculative.eagle.tree``, V vocabulary):

    parents        list of N ints     the tree; node 0 is the last committed token
    tokens         list of N ints     each node's token (the root's is already in the text)
    target_probs   [N, V]             the target's distribution after the chain at each node: the law of
                                      the token after that node's root-to-node path (one tree pass)
    draft_probs    [N, V]             the draft's distribution at each node, the one its children were
                                      drawn from (rows of leaves are never read)

Two verifiers walk the tree from the root:

- ``greedy``: follow the child whose token is the target's argmax; the accepted path is the
  longest one the target agrees with, then the target's argmax is added.
- ``sampling``: recursive rejection sampling over siblings (SpecInfer, Miao et al. 2023,
  "multi-step speculative sampling"; Jeon et al. 2024, "Recursive Speculative Decoding"; the scheme
  EAGLE uses). The children of a node are drawn *without replacement* from its draft
  distribution (``draw_children``). The k-th child x was drawn from q_k, the draft with the earlier
  siblings removed and renormalised; it is accepted with probability min(1, p_k(x) / q_k(x)). On a
  rejection p_{k+1} = norm(max(0, p_k - q_k)) and x leaves q. Each test is one step of Leviathan et
  al.'s lossless scheme with proposal q_k, and the next sibling is a fresh draw from q_{k+1} given
  everything before, so the token that comes out at a node follows p_1, the target, exactly. When
  every child is rejected, the target's token is drawn from the last residual; after an accepted
  leaf, the bonus token from the leaf's target row.

The shape of the tree must not depend on the drafted tokens' own probabilities (a static tree, or a
dynamic tree at temperature 0): keeping a sibling because it scored high biases what it is accepted
for.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from strategies.speculative.eagle.tree import check_parents, children
from strategies.speculative.verify import RESIDUAL_FLOOR, sample


@dataclass
class TreeVerdict:
    """What one tree verification decided. Per-node lists have N entries (the root's unused).

    path: accepted nodes after the root, root to deepest.
    next_id: the token the target adds (resampled after the last rejection, bonus after an accepted leaf).
    next_probs: [V] the distribution ``next_id`` was drawn from (one-hot at the argmax under greedy).
    from_residual: ``next_probs`` is a residual left by rejected siblings, not the target's own row.
    evaluated: the node's token was tested (its parent was on the accepted path).
    accept_prob, u: the test's probability and uniform (u is None under greedy and for untested nodes).
    p_target, q_draft: each node's probability under its parent's target row and draft row.
    """

    path: list[int]
    next_id: int
    next_probs: torch.Tensor
    from_residual: bool
    evaluated: list[bool]
    accept_prob: list[float | None]
    u: list[float | None]
    p_target: list[float]
    q_draft: list[float]

    @property
    def accepted(self) -> list[bool]:
        on_path = set(self.path)
        return [i in on_path for i in range(len(self.evaluated))]


def draw_children(probs: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """Up to ``k`` distinct tokens drawn one after another from [V] ``probs``, each with the earlier ones
    removed (fewer when the distribution runs out of tokens with mass)."""
    rest = probs.clone()
    out: list[int] = []
    for _ in range(k):
        if float(rest.sum()) <= 0:
            break
        token = int(sample(rest.unsqueeze(0), generator)[0])
        out.append(token)
        rest[token] = 0.0
    return out


def _check(parents: list[int], tokens: list[int], target_probs: torch.Tensor, draft_probs: torch.Tensor) -> None:
    check_parents(parents)
    n = len(parents)
    if len(tokens) != n or target_probs.shape[0] != n or draft_probs.shape[0] != n:
        raise ValueError(f"shapes disagree: {n} nodes, {len(tokens)} tokens, target_probs "
                         f"{tuple(target_probs.shape)}, draft_probs {tuple(draft_probs.shape)}")


def _parent_probs(parents: list[int], tokens: list[int], probs: torch.Tensor) -> list[float]:
    return [0.0] + [float(probs[parents[i], tokens[i]]) for i in range(1, len(parents))]


def greedy(parents: list[int], tokens: list[int], target_probs: torch.Tensor, draft_probs: torch.Tensor
           ) -> TreeVerdict:
    """The longest root-to-node path whose every token is the target's argmax, then that argmax."""
    _check(parents, tokens, target_probs, draft_probs)
    n = len(parents)
    kids = children(parents)
    evaluated: list[bool] = [False] * n
    accept_prob: list[float | None] = [None] * n
    path: list[int] = []
    node = 0
    while True:
        best = int(target_probs[node].argmax())
        nxt = None
        for child in kids[node]:
            evaluated[child] = True
            accept_prob[child] = 1.0 if tokens[child] == best else 0.0
            if tokens[child] == best and nxt is None:
                nxt = child
        if nxt is None:
            one_hot = torch.zeros_like(target_probs[node])
            one_hot[best] = 1.0
            return TreeVerdict(path, best, one_hot, False, evaluated, accept_prob, [None] * n,
                               _parent_probs(parents, tokens, target_probs),
                               _parent_probs(parents, tokens, draft_probs))
        path.append(nxt)
        node = nxt


def sampling(parents: list[int], tokens: list[int], target_probs: torch.Tensor, draft_probs: torch.Tensor,
             generator: torch.Generator) -> TreeVerdict:
    """Recursive rejection sampling over siblings (see the module docstring): lossless."""
    _check(parents, tokens, target_probs, draft_probs)
    n = len(parents)
    kids = children(parents)
    evaluated: list[bool] = [False] * n
    accept_prob: list[float | None] = [None] * n
    us: list[float | None] = [None] * n
    path: list[int] = []
    node = 0
    while True:
        p, q = target_probs[node].clone(), draft_probs[node].clone()
        residual = False
        accepted = None
        for child in kids[node]:
            x = tokens[child]
            a = min(1.0, float(p[x]) / max(float(q[x]), torch.finfo(q.dtype).tiny))
            u = float(torch.rand((), generator=generator, device=p.device))
            evaluated[child], accept_prob[child], us[child] = True, a, u
            if u < a:
                accepted = child
                break
            left = (p - q).clamp_min(0.0)
            mass = float(left.sum())
            if mass > RESIDUAL_FLOOR:  # below it target and draft agree up to rounding: keep p
                p, residual = left / mass, True
            q[x] = 0.0
            q_mass = float(q.sum())
            q = q / q_mass if q_mass > 0 else q
        if accepted is None:
            return TreeVerdict(path, int(sample(p.unsqueeze(0), generator)[0]), p, residual, evaluated,
                               accept_prob, us, _parent_probs(parents, tokens, target_probs),
                               _parent_probs(parents, tokens, draft_probs))
        path.append(accepted)
        node = accepted
