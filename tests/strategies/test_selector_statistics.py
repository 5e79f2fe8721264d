"""Statistical: the multinomial and Gumbel-max selectors, after each truncation, draw
from exactly the analytic truncated distribution (chi-square, 100,000 draws, vocab 10).

Each case also checks the test's power: the same draws must reject the untruncated
distribution decisively, so a selector that ignored the chain would fail."""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from strategies.sampling.chain import ChainParams, GumbelMax, Multinomial, apply_chain, build_chain

DRAWS = 100_000
VOCAB = 10
ALPHA = 1e-3  # a correct sampler fails this with probability 0.001; the seeds are fixed


def base_logits() -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    return torch.randn(VOCAB, generator=g, dtype=torch.float64) * 1.5


CHAINS = {
    "none": ChainParams(),
    "temperature 0.6": ChainParams(temperature=0.6),
    "top_k 4": ChainParams(top_k=4),
    "top_p 0.8": ChainParams(top_p=0.8),
    "min_p 0.02": ChainParams(min_p=0.02),
    "temperature 1.5 + top_p 0.9 + min_p 0.05": ChainParams(temperature=1.5, top_p=0.9, min_p=0.05),
}


@pytest.mark.parametrize("selector_cls", [Multinomial, GumbelMax], ids=["multinomial", "gumbel"])
@pytest.mark.parametrize("name", list(CHAINS))
def test_histogram_matches_truncated_distribution(selector_cls, name):
    logits = base_logits()
    context = torch.zeros((1, 0), dtype=torch.long)
    final = apply_chain(build_chain(CHAINS[name]), logits[None], context)[0]
    expected = final.softmax(-1).numpy()
    batch = final.expand(DRAWS, VOCAB)
    seed = sum(map(ord, name)) + (0 if selector_cls is Multinomial else 10_000)
    ids, _ = selector_cls(torch.Generator().manual_seed(seed)).select(batch)
    counts = np.bincount(ids.numpy(), minlength=VOCAB)

    kept = expected > 0
    assert counts[~kept].sum() == 0, "a truncated token was drawn"
    observed, exp = counts[kept], expected[kept] * DRAWS
    assert kept.sum() >= 3, "the case should keep several tokens to be a test"
    assert chisquare(observed, exp).pvalue > ALPHA

    raw = logits.softmax(-1).numpy()
    if not np.allclose(raw, expected, atol=1e-3):
        # Power: the untruncated distribution must be rejected by these very draws.
        with np.errstate(divide="ignore"):
            p_wrong = chisquare(counts, raw * DRAWS).pvalue
        assert p_wrong < 1e-6


def test_gumbel_noise_is_standard_gumbel():
    """The recorded noise has the Gumbel(0, 1) mean (Euler-Mascheroni) and variance pi^2 / 6."""
    _, noise = GumbelMax(torch.Generator().manual_seed(3)).select(torch.zeros((DRAWS, 4)))
    noise = noise.double()
    assert abs(noise.mean().item() - 0.5772156649) < 0.01
    assert abs(noise.var().item() - np.pi ** 2 / 6) < 0.03
