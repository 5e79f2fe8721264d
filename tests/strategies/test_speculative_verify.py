"""Verification on hand-made tables: every number checked against the rule it comes from."""
from __future__ import annotations

import pytest
import torch

from strategies.speculative.drafts import lookup
from strategies.speculative.verify import rejection, sample, topk


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# One draft of two tokens over a 4-token vocabulary: x_1 = 1 (draft over-confident), x_2 = 2.
TARGET = torch.tensor([[[0.1, 0.2, 0.3, 0.4],
                        [0.25, 0.25, 0.25, 0.25],
                        [0.7, 0.1, 0.1, 0.1]]])
DRAFT = torch.tensor([[[0.1, 0.6, 0.2, 0.1],
                       [0.0, 0.0, 1.0, 0.0]]])
IDS = torch.tensor([[1, 2]])


def test_rejection_records_the_rule():
    v = rejection(TARGET, DRAFT, IDS, gen())
    assert torch.allclose(v.p_target, torch.tensor([[0.2, 0.25]]))
    assert torch.allclose(v.q_draft, torch.tensor([[0.6, 1.0]]))
    assert torch.allclose(v.accept_prob, torch.tensor([[0.2 / 0.6, 0.25]]))
    expected_pass = v.u < v.accept_prob
    n = int(v.n_accepted[0])
    assert n == (0 if not expected_pass[0, 0] else 1 if not expected_pass[0, 1] else 2)
    assert v.accepted[0].tolist() == [i < n for i in range(2)]


def test_residual_after_a_rejection_at_the_first_token():
    """Draws that reject x_1: the next token comes from norm(max(0, target - draft)) at position 0."""
    residual = torch.tensor([0.0, 0.0, 0.1, 0.3]) / 0.4
    for seed in range(40):
        v = rejection(TARGET, DRAFT, IDS, gen(seed))
        if int(v.n_accepted[0]) == 0:
            assert torch.allclose(v.next_probs[0], residual) and v.from_residual.tolist() == [True]
            assert int(v.next_ids[0]) in (2, 3)  # never a token the residual gives nothing
            return
    pytest.fail("no seed rejected the first token")


def test_bonus_comes_from_the_target_after_the_last_draft():
    always = torch.tensor([[[0.5, 0.5, 0.0, 0.0]]])  # the draft is the target: every draft passes
    target = torch.cat([always, torch.tensor([[[0.0, 0.0, 0.0, 1.0]]])], 1)
    v = rejection(target, always, torch.tensor([[1]]), gen())
    assert v.bonus.tolist() == [True] and v.next_ids.tolist() == [3]
    assert torch.equal(v.next_probs[0], target[0, 1]) and v.from_residual.tolist() == [False]


def test_no_draft_is_a_plain_target_step():
    target = torch.tensor([[[0.0, 1.0, 0.0]]])
    for verify in (rejection, lambda t, d, i, g: topk(t, d, i, g, 2, t)):
        v = verify(target, torch.zeros(1, 0, 3), torch.zeros(1, 0, dtype=torch.long), gen())
        assert v.n_accepted.tolist() == [0] and v.bonus.tolist() == [True] and v.next_ids.tolist() == [1]


def test_greedy_reduces_to_argmax_agreement():
    """Temperature 0 leaves one-hot rows: accept exactly while draft == target argmax, then its argmax."""
    target = torch.eye(5)[[3, 1, 4, 0]].unsqueeze(0)  # argmaxes 3, 1, 4, 0
    draft = torch.eye(5)[[3, 1, 2]].unsqueeze(0)
    for seed in range(5):
        v = rejection(target, draft, torch.tensor([[3, 1, 2]]), gen(seed))
        assert v.accepted.tolist() == [[True, True, False]]
        assert v.accept_prob.tolist() == [[1.0, 1.0, 0.0]]
        assert v.next_ids.tolist() == [4]


def test_one_hot_draft_prompt_lookup():
    """A deterministic proposal: accepted with the target's own probability; the residual drops it."""
    target = torch.tensor([[[0.5, 0.3, 0.2], [1.0, 0.0, 0.0]]])
    draft = torch.tensor([[[0.0, 1.0, 0.0]]])
    v = rejection(target, draft, torch.tensor([[1]]), gen(1))
    assert torch.allclose(v.accept_prob, torch.tensor([[0.3]]))
    if not v.accepted[0, 0]:
        assert torch.allclose(v.next_probs[0], torch.tensor([0.5 / 0.7, 0.0, 0.2 / 0.7]))


def test_one_hot_draft_is_lossless_in_closed_form():
    """Batched: P(out = x) = target(x) for a lookup that always proposes token 1."""
    n = 100_000
    target = torch.tensor([0.5, 0.3, 0.2]).expand(n, 2, 3)
    draft = torch.tensor([0.0, 1.0, 0.0]).expand(n, 1, 3)
    v = rejection(target, draft, torch.ones(n, 1, dtype=torch.long), gen(2))
    first = torch.where(v.accepted[:, 0], torch.ones(n, dtype=torch.long), v.next_ids)
    freq = torch.bincount(first, minlength=3).double() / n
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), atol=0.006)


def test_topk_accepts_inside_the_targets_top_k_only():
    target = torch.tensor([[[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]])
    draft = torch.full((1, 2, 4), 0.25)
    v = topk(target, draft, torch.tensor([[1, 0]]), gen(), 2, target)  # 1 is 2nd of the first row; 0 is last
    assert v.accepted.tolist() == [[True, False]]
    assert v.accept_prob.tolist() == [[1.0, 0.0]]
    assert torch.allclose(v.raw_p_target, torch.tensor([[0.3, 0.1]]))
    assert torch.allclose(v.raw_kth, torch.tensor([[0.3, 0.3]]))  # the 2nd largest of each row
    assert torch.isnan(v.u).all()  # no uniform draws: the test is deterministic
    assert torch.equal(v.next_probs[0], target[0, 1])  # the target draws its own token (no residual)
    assert v.from_residual.tolist() == [False]


def test_topk_takes_k_on_the_target_models_own_distribution():
    """The chain cannot override K: at T = 0 (one-hot after the chain) a drafted token in the model's own
    top 2 still passes, and the replacement comes from the chained distribution."""
    raw = torch.tensor([[[0.4, 0.3, 0.2, 0.1], [0.1, 0.6, 0.2, 0.1]]])
    chained = torch.tensor([[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]])  # what temperature 0 leaves
    draft = torch.tensor([[[0.0, 1.0, 0.0, 0.0]]])
    ids = torch.tensor([[1]])
    two = topk(chained, draft, ids, gen(), 2, raw)
    assert two.accepted.tolist() == [[True]] and two.p_target.tolist() == [[0.0]]  # cut by the chain, yet in
    assert two.next_ids.tolist() == [1]  # the bonus, from the chained row after it
    one = topk(chained, draft, ids, gen(), 1, raw)
    assert one.accepted.tolist() == [[False]] and one.next_ids.tolist() == [0]
    assert torch.equal(one.next_probs[0], chained[0, 0])
    with pytest.raises(ValueError, match="shapes disagree"):
        topk(chained, draft, ids, gen(), 1, raw[:, :, :3])


def test_inputs_are_not_modified():
    t, d, i = TARGET.clone(), DRAFT.clone(), IDS.clone()
    rejection(t, d, i, gen())
    raw = TARGET.flip(-1)
    topk(t, d, i, gen(), 2, raw)
    assert torch.equal(t, TARGET) and torch.equal(raw, TARGET.flip(-1)) and torch.equal(d, DRAFT) and torch.equal(i, IDS)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="shapes disagree"):
        rejection(TARGET[:, :2], DRAFT, IDS, gen())


def test_sampler_follows_its_distribution_and_skips_zeros():
    probs = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3, 0.0]).expand(200_000, 6)
    ids = sample(probs, gen(5))
    freq = torch.bincount(ids, minlength=6).double() / len(ids)
    assert freq[[0, 2, 5]].sum() == 0
    assert torch.allclose(freq, probs[0].double(), atol=0.004)


def test_prompt_lookup_prefers_the_longest_latest_match():
    ids = [5, 6, 7, 1, 2, 6, 7, 3, 4, 9, 6, 7]
    assert lookup(ids, max_ngram=2, gamma=3) == [3, 4, 9]  # "6 7" last seen before "3 4 9"
    assert lookup(ids, max_ngram=3, gamma=2) == [3, 4]  # no earlier "9 6 7": falls back to "6 7"
    assert lookup([1, 2, 3], max_ngram=3, gamma=4) == []
    assert lookup([4, 1, 4], max_ngram=1, gamma=4) == [1, 4]
