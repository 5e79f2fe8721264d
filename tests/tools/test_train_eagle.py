"""The training-time test of the EAGLE trainer (``--unroll``): each unrolled step must compute what
the head computes when it drafts that deep, and a run of a few steps must train."""
from __future__ import annotations

import pytest
import torch

from playground.tools import train_eagle
from strategies.speculative.eagle.head import EagleHead


@pytest.fixture
def head_and_inputs(store):
    lm = store.get("toy")
    torch.manual_seed(3)
    head = EagleHead(lm.model.config).float().eval()
    for p in head.parameters():  # a random head, far from any fixed point
        torch.nn.init.normal_(p, std=0.3)
    d = int(lm.model.config.hidden_size)
    emb = torch.randn(2, 7, d)
    feats = torch.randn(2, 7, d)
    return head, emb, feats


def drafted(head, emb, feats, t, chain):
    """Step by step as the drafter does: a cache of real entries up to index t, then each deeper step
    fed the previous prediction, one token at a time at the next position."""
    cache = head.new_cache()
    pred, cache = head(emb[:, :t + 1], feats[:, :t + 1], cache)
    last, outs = pred[:, -1:], [pred[:, -1]]
    for s in range(1, chain):
        last, cache = head(emb[:, t + s:t + s + 1], last, cache, None, torch.tensor([[t + s]]))
        outs.append(last[:, -1])
    return outs


@pytest.mark.parametrize("unroll", [2, 3])
def test_each_unrolled_step_is_what_drafting_computes(head_and_inputs, unroll):
    head, emb, feats = head_and_inputs
    with torch.no_grad():
        steps = train_eagle.unrolled(head, emb, feats, unroll)
        assert [s.shape[1] for s in steps] == [7 - s for s in range(unroll)]
        for t in range(7 - unroll + 1):
            chain = drafted(head, emb, feats, t, unroll)
            for s in range(unroll):
                torch.testing.assert_close(steps[s][:, t], chain[s], rtol=1e-4, atol=1e-4)


def test_a_deeper_step_differs_from_reading_real_features(head_and_inputs):
    """Step 2 reads the head's own prediction, not the target's next feature: were the mask or the
    inputs wrong in a way that reads real features, it would equal step 1 one position on."""
    head, emb, feats = head_and_inputs
    with torch.no_grad():
        one, two = train_eagle.unrolled(head, emb, feats, 2)
    assert (two[:, :-1] - one[:, 1:-1]).abs().max() > 1e-2


def test_unrolled_training_lowers_the_loss(store):
    lm = store.get("toy")
    seqs = [[15, 1, 2, 3, 4, 5, 6, 7], [15, 3, 4, 5, 6, 7, 8], [15, 2, 3, 4, 5, 6]] * 4
    data = train_eagle.features(lm, seqs)
    g = torch.Generator().manual_seed(0)
    head, fit = train_eagle.train(lm, data, epochs=30, lr=3e-3, cap_seconds=600, seed=0, vocab=None,
                                  batch_tokens=64, log=lambda m: None, unroll=2)
    assert fit["unroll"] == 2
    fresh = EagleHead(lm.model.config).float()
    batch = list(range(len(data)))
    with torch.no_grad():
        trained = sum(train_eagle.loss_terms(head, lm, data, batch, None, g, 2))
        untrained = sum(train_eagle.loss_terms(fresh, lm, data, batch, None, g, 2))
    assert trained < 0.5 * untrained
